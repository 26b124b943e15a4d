"""ScoringProcessPool: real scoring processes; hung calls are killed (with their children) and replaced, crashes and
exceptions are reported per call, and the pool keeps serving."""

import os
from pathlib import Path

import pytest

from skyrl_train.rewards.functions import RewardFunctionError
from skyrl_train.rewards.process_pool import ScoringProcessPool

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting for its new parent to reap it counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _call(solution="4", **extra_info):
    return {"data_source": "m", "solution_str": solution, "ground_truth": "4", "extra_info": extra_info}


@pytest.fixture
def pool_factory():
    pools = []

    def make(spec, num_workers=2, timeout_s=1.0):
        pools.append(ScoringProcessPool(spec, num_workers, timeout_s))
        return pools[-1]

    yield make
    for pool in pools:
        pool.close()


def test_a_hung_call_is_killed_with_its_children_and_the_pool_keeps_serving(pool_factory, scorer_file, tmp_path):
    pool = pool_factory(f"{scorer_file}:score", num_workers=2, timeout_s=1.0)
    assert all(r.ok for r in pool.map([_call(), _call()]))  # processes started
    started = set(pool.worker_pids())
    pid_file = tmp_path / "child.pid"
    results = pool.map([_call(), _call(kind="hang_with_child", pid_file=str(pid_file)), _call("5")])
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].kind == "timeout" and pool.num_killed == 1
    killed = started - set(pool.worker_pids())
    assert len(killed) == 1 and not _alive(killed.pop()), "the hung process must be killed"
    assert not _alive(int(pid_file.read_text())), "the process the hung function started must be killed too"
    assert len(pool.worker_pids()) == 2 and all(_alive(pid) for pid in pool.worker_pids())
    again = pool.map([_call(), _call()])  # the pool, with its replacement process, serves the next batch
    assert all(r.ok for r in again) and {r.value["pid"] for r in again} <= set(pool.worker_pids())


def test_timeout_s_decides_whether_a_slow_call_finishes(pool_factory, scorer_file):
    slow = _call(kind="sleep", seconds=0.5)
    assert pool_factory(f"{scorer_file}:score", num_workers=1, timeout_s=30.0).map([slow])[0].ok
    short = pool_factory(f"{scorer_file}:score", num_workers=1, timeout_s=0.1).map([slow])[0]
    assert (short.ok, short.kind) == (False, "timeout")


def test_num_workers_processes_serve_the_calls(pool_factory, scorer_file):
    pool = pool_factory(f"{scorer_file}:score", num_workers=3, timeout_s=30.0)
    results = pool.map([_call(kind="sleep", seconds=0.2) for _ in range(6)])
    pids = pool.worker_pids()
    assert len(pids) == 3 and len(set(pids)) == 3 and os.getpid() not in pids
    assert {r.value["pid"] for r in results} <= set(pids)


def test_exceptions_and_crashes_are_reported_per_call(pool_factory, scorer_file):
    pool = pool_factory(f"{scorer_file}:score", num_workers=1, timeout_s=30.0)
    results = pool.map([_call(kind="raise"), _call(kind="exit"), _call()])
    assert [r.ok for r in results] == [False, False, True]
    assert results[0].reason == "ValueError: cannot parse the answer"
    assert results[1].reason == "the scoring process exited with code 3"
    assert results[2].value["score"] == 1.0


def test_a_function_that_fails_to_import_stops_the_pool_with_its_traceback(pool_factory, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('missing dependency for scoring')\n\ndef fn(**kwargs):\n    return 1.0\n")
    pool = pool_factory(f"{broken}:fn", num_workers=2)
    with pytest.raises(RewardFunctionError, match="failed to load in a scoring process(.|\n)*missing dependency"):
        pool.map([_call()])
    assert pool.worker_pids() == []


def test_close_kills_every_process(scorer_file):
    pool = ScoringProcessPool(f"{scorer_file}:score", num_workers=2, timeout_s=30.0)
    pool.map([_call()])
    pids = pool.worker_pids()
    pool.close()
    assert pool.worker_pids() == [] and not any(_alive(pid) for pid in pids)
