"""`EnvPool`: env calls off the event loop, one at a time (`call`) or a whole batch at once (`call_all`).

Env calls are user code that may block (a sandbox, a database, a grader), so they run in a bounded thread pool with a
time limit. A multi-turn episode awaits its env one call at a time. The batched single-turn path has a call per row
and nothing to do until all of them return, so `call_all` hands the rows to at most `max_workers` runner threads that
pull them one by one and waits for them together: one event-loop round trip per phase and one thread hop per runner
instead of one per row, which for cheap envs (the synthetic ones answer in microseconds) was most of the generator's
time. A batch starts with two runners and gets the others only if it is still running after 5 ms, so a batch of cheap
calls does not wake every thread of the pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

EAGER_RUNNERS = 2
"""Runner threads a `call_all` batch starts with."""
TOP_UP_AFTER_S = 0.005
"""A batch still running after this long gets its other runners (up to `max_workers`)."""


@dataclass
class EnvCallResult:
    """What one call of a batch did: its return value, the exception it raised, or that it timed out."""

    value: Any = None
    error: Optional[BaseException] = None
    timed_out: bool = False


class EnvPool:
    """A thread pool for env calls with a per-call time limit (`timeout_s`, None: no limit) and a clock.

    `seconds` accumulates the wall time callers spent waiting for env calls (overlapping `call`s add up); the
    generator reports it as `generate/env_seconds`. A call that times out keeps running in its thread (Python cannot
    stop it) but its result is dropped; a batch call that has not started by then is not started.
    """

    def __init__(self, max_workers: int, timeout_s: Optional[float]) -> None:
        self.timeout_s = timeout_s
        self.seconds = 0.0
        self.max_workers = max_workers
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="skyrl-env")

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in the pool; raises what it raises, or `TimeoutError` after `timeout_s`."""
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        try:
            return await asyncio.wait_for(loop.run_in_executor(self._pool, fn, *args), timeout=self.timeout_s)
        finally:
            self.seconds += time.perf_counter() - start

    async def call_all(self, calls: list[Callable[[], Any]]) -> list[EnvCallResult]:
        """Run every zero-argument call on the pool's runner threads; one result per call, in order.

        The time limit counts from submission, as `call`'s does: a call still queued or running `timeout_s` after
        the batch started is reported as timed out. The event loop awaits the runners themselves (no thread sits
        waiting for them), so concurrent batches (the groups of fully_async generation, each waiting on a grader)
        are bounded by the pool's `max_workers` only.
        """
        if not calls:
            return []
        start = time.perf_counter()
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        finished: list[Optional[EnvCallResult]] = [None] * len(calls)
        next_index = itertools.count()  # next() on it is atomic under the GIL

        # A few runner threads pull the calls from a shared counter instead of one pool task per call: a task hop
        # costs more than a synthetic env's whole call, and pulling keeps a slow call from holding up the rest.
        def runner() -> asyncio.Future:
            return asyncio.wrap_future(self._pool.submit(self._run_calls, calls, finished, next_index, deadline))

        # Two runners first; the rest join if the batch is still running after `TOP_UP_AFTER_S`. Cheap envs finish
        # by then, and waking 16 threads for a batch one thread does in a millisecond cost more than the batch.
        wanted = min(self.max_workers, len(calls))
        runners = [runner() for _ in range(min(EAGER_RUNNERS, wanted))]
        try:
            first_wait = TOP_UP_AFTER_S if self.timeout_s is None else min(TOP_UP_AFTER_S, self.timeout_s)
            _, running = await asyncio.wait(runners, timeout=first_wait)
            if running and len(runners) < wanted:
                runners += [runner() for _ in range(wanted - len(runners))]
            left = None if self.timeout_s is None else max(0.0, self.timeout_s - (time.perf_counter() - start))
            await asyncio.wait(runners, timeout=left)
        finally:
            self.seconds += time.perf_counter() - start
        return [result if result is not None else EnvCallResult(timed_out=True) for result in list(finished)]

    def run_here(self, calls: list[Callable[[], Any]]) -> list[EnvCallResult]:
        """Run every call in the calling thread, in order (for envs that declare `nonblocking`: a call that never
        blocks does not need a thread hop). No time limit applies; the wall time counts in `seconds` as `call_all`'s
        does."""
        start = time.perf_counter()
        finished: list[Optional[EnvCallResult]] = [None] * len(calls)
        try:
            self._run_calls(calls, finished, itertools.count(), None)
        finally:
            self.seconds += time.perf_counter() - start
        return finished

    @staticmethod
    def _run_calls(
        calls: list[Callable[[], Any]],
        finished: list[Optional[EnvCallResult]],
        next_index: Iterator[int],
        deadline: Optional[float],
    ) -> None:
        """A runner: take the next call not taken yet and record its result, until none is left or the deadline
        passed (a call not started in time is reported as timed out)."""
        for index in next_index:
            if index >= len(calls):
                return
            if deadline is not None and time.monotonic() >= deadline:
                return
            try:
                finished[index] = EnvCallResult(value=calls[index]())
            except BaseException as error:  # noqa: BLE001 - user env code: every failure is reported per row
                finished[index] = EnvCallResult(error=error)

    def shutdown(self) -> None:
        """Stop the pool without waiting for running calls; queued ones are cancelled."""
        self._pool.shutdown(wait=False, cancel_futures=True)
