"""WeightGate: a weight change waits for running requests and holds new ones; requests run together otherwise."""

import asyncio
import threading
import time

from skyrl_train.inference.gate import WeightGate


def test_closing_waits_for_running_requests_and_holds_new_ones():
    gate = WeightGate()
    events = []

    async def request(name, seconds):
        async with gate.serving():
            events.append(f"{name} start")
            await asyncio.sleep(seconds)
            events.append(f"{name} end")

    async def update():
        await asyncio.sleep(0.05)  # r1 is running
        async with gate.closed():
            events.append("update start")
            await asyncio.sleep(0.2)
            events.append("update end")

    async def late_request():
        await asyncio.sleep(0.1)  # arrives while the update waits or runs
        await request("r2", 0.0)

    async def main():
        await asyncio.gather(request("r1", 0.15), update(), late_request())

    asyncio.run(main())
    assert events == ["r1 start", "r1 end", "update start", "update end", "r2 start", "r2 end"]


def test_requests_run_concurrently_and_the_gate_works_across_event_loops():
    gate = WeightGate()
    inside = []

    async def request():
        async with gate.serving():
            inside.append(gate.requests_in_flight)
            await asyncio.sleep(0.1)

    async def many():
        await asyncio.gather(*(request() for _ in range(5)))

    thread = threading.Thread(target=lambda: asyncio.run(many()))  # the server's loop in its own thread
    thread.start()
    time.sleep(0.05)

    async def update():
        async with gate.closed():  # from the main thread's loop: waits for the other loop's requests
            return gate.requests_in_flight

    assert asyncio.run(update()) == 0
    thread.join()
    assert max(inside) == 5  # all five were inside together
