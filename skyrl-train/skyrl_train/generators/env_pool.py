"""`EnvPool`: env calls off the event loop, one at a time (`call`) or a whole batch at once (`call_all`).

Env calls are user code that may block (a sandbox, a database, a grader), so they run in a bounded thread pool with a
time limit. A multi-turn episode awaits its env one call at a time. The batched single-turn path has a call per row
and nothing to do until all of them return, so `call_all` submits the rows to the pool from one helper thread and
waits for them together: one event-loop round trip per phase instead of one per row, which for cheap envs (the
synthetic ones answer in microseconds) was most of the generator's time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional


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
    stop it) but its result is dropped; a batch call that has not started by then is cancelled.
    """

    def __init__(self, max_workers: int, timeout_s: Optional[float]) -> None:
        self.timeout_s = timeout_s
        self.seconds = 0.0
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
        """Run every zero-argument call in the pool, all submitted at once; one result per call, in order.

        The time limit counts from submission, as `call`'s does: a call still queued or running `timeout_s` after
        the batch started is reported as timed out.
        """
        if not calls:
            return []
        start = time.perf_counter()
        try:
            return await asyncio.to_thread(self._run_all, calls)
        finally:
            self.seconds += time.perf_counter() - start

    def _run_all(self, calls: list[Callable[[], Any]]) -> list[EnvCallResult]:
        futures = [self._pool.submit(call) for call in calls]
        concurrent.futures.wait(futures, timeout=self.timeout_s)
        results = []
        for future in futures:
            if not future.done():
                future.cancel()  # drops it if it has not started; a running call finishes unobserved
                results.append(EnvCallResult(timed_out=True))
            elif future.exception() is not None:
                results.append(EnvCallResult(error=future.exception()))
            else:
                results.append(EnvCallResult(value=future.result()))
        return results

    def shutdown(self) -> None:
        """Stop the pool without waiting for running calls; queued ones are cancelled."""
        self._pool.shutdown(wait=False, cancel_futures=True)
