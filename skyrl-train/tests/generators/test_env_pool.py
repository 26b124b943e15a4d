"""`EnvPool`: single calls and whole batches of env calls in a thread pool, with a time limit per call."""

import asyncio
import threading
import time

import pytest

from skyrl_train.generators import env_pool
from skyrl_train.generators.env_pool import EnvPool


def test_call_all_keeps_order_values_errors_and_timeouts():
    pool = EnvPool(max_workers=4, timeout_s=0.5)
    release = threading.Event()

    def fail():
        raise KeyError("row 1")

    calls = [lambda: "a", fail, lambda: release.wait(5) and "late", lambda: 3]
    try:
        results = asyncio.run(pool.call_all(calls))
    finally:
        release.set()
        pool.shutdown()
    assert [r.value for r in results] == ["a", None, None, 3]
    assert isinstance(results[1].error, KeyError)
    assert [r.timed_out for r in results] == [False, False, True, False]
    assert pool.seconds >= 0.5  # the batch waited for its slowest call's limit


def test_a_call_still_queued_at_the_limit_is_cancelled_and_never_runs():
    pool = EnvPool(max_workers=1, timeout_s=0.3)
    ran = []
    release = threading.Event()
    calls = [lambda: release.wait(5), lambda: ran.append("second")]
    try:
        results = asyncio.run(pool.call_all(calls))
        assert [r.timed_out for r in results] == [True, True]
    finally:
        release.set()
    time.sleep(0.2)  # the first call returns now; a cancelled second call must not start after it
    pool.shutdown()
    assert ran == []


def test_a_slow_call_does_not_hold_up_the_rows_behind_it():
    pool = EnvPool(max_workers=2, timeout_s=5)
    threads = {}
    started = threading.Event()

    def slow():
        threads["slow"] = threading.get_ident()
        started.set()
        time.sleep(1.0)
        return "slow"

    def fast(index):
        started.wait(5)  # the slow call holds one runner from here on
        threads[index] = threading.get_ident()
        return index

    calls = [slow] + [lambda i=i: fast(i) for i in range(20)]
    try:
        results = asyncio.run(pool.call_all(calls))
    finally:
        pool.shutdown()
    assert [r.value for r in results] == ["slow", *range(20)]
    # the free runner pulled every other row while the slow call ran (no fixed split of rows between runners)
    assert all(threads[i] != threads["slow"] for i in range(20))


def test_single_calls_raise_what_the_call_raises_or_timeout():
    pool = EnvPool(max_workers=2, timeout_s=0.2)

    async def run():
        assert await pool.call(lambda x: x + 1, 1) == 2
        with pytest.raises(ValueError, match="bad"):
            await pool.call(lambda: (_ for _ in ()).throw(ValueError("bad")))
        with pytest.raises(TimeoutError):
            await pool.call(time.sleep, 1)

    asyncio.run(run())
    pool.shutdown()


def test_an_empty_batch_returns_nothing():
    pool = EnvPool(max_workers=1, timeout_s=None)
    assert asyncio.run(pool.call_all([])) == []
    pool.shutdown()


def test_concurrent_batches_are_bounded_by_the_pool_not_by_asyncio_default_executor():
    # fully_async runs one batched generate per prompt group, each waiting on its env (a grader API) at once; the
    # default executor has at most 32 threads (min(32, cpus + 4)), so 40 concurrent batches must not need one each
    batches = 40
    pool = EnvPool(max_workers=64, timeout_s=30)
    everyone_in = threading.Barrier(batches, timeout=10)

    async def all_batches():
        return await asyncio.gather(*(pool.call_all([everyone_in.wait]) for _ in range(batches)))

    try:
        results = asyncio.run(all_batches())
    finally:
        everyone_in.abort()
        pool.shutdown()
    errors = [result[0].error for result in results if result[0].error is not None]
    assert not errors, f"{len(errors)} of {batches} env calls never ran together: {errors[0]!r}"


def _threads_used(pool, calls_made):
    threads = set()
    lock = threading.Lock()

    def call(work):
        with lock:
            threads.add(threading.get_ident())
        return work()

    results = asyncio.run(pool.call_all([lambda w=w: call(w) for w in calls_made]))
    return results, threads


def test_a_cheap_batch_runs_on_the_eager_runners_and_a_slow_one_gets_every_runner(monkeypatch):
    pool = EnvPool(max_workers=8, timeout_s=5)
    try:
        # the top-up delay stretched to 1 s so that a busy machine cannot make this batch outlast it
        monkeypatch.setattr(env_pool, "TOP_UP_AFTER_S", 1.0)
        results, threads = _threads_used(pool, [lambda i=i: i for i in range(200)])
        assert [r.value for r in results] == list(range(200))
        assert len(threads) <= env_pool.EAGER_RUNNERS  # microsecond calls: done before the others were due
        monkeypatch.undo()
        inside, most_inside = [0], [0]
        lock = threading.Lock()

        def slow():
            with lock:
                inside[0] += 1
                most_inside[0] = max(most_inside[0], inside[0])
            time.sleep(0.2)
            with lock:
                inside[0] -= 1
            return "done"

        results, threads = _threads_used(pool, [slow] * 8)
        assert [r.value for r in results] == ["done"] * 8
        assert len(threads) == 8 and most_inside[0] == 8  # still running after 5 ms: all 8 runners took a call
    finally:
        pool.shutdown()
