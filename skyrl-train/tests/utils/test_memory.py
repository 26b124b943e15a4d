"""Resident memory of the run's processes: `/proc` readings and the `memory/*` step metrics."""

import asyncio
import json
import subprocess
import sys

from skyrl_train.utils.memory import MIB, MemoryMonitor, TrackedProcess, read_rss

GROW_AND_FREE = """
import json
from skyrl_train.utils.memory import MIB, read_rss
before = read_rss()
block = bytearray(64 * MIB)  # zero-filled: every page is touched
during = read_rss()
del block
print(json.dumps([before, during, read_rss()]))
"""


def test_read_rss_sees_this_process_grow_and_keeps_the_peak():
    # in a fresh interpreter: a long test process's allocator may hand the block pages that are already resident
    # (a clean-clone CI run read the same VmRSS before and after allocating 64 MiB)
    done = subprocess.run([sys.executable, "-c", GROW_AND_FREE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    before, during, after = json.loads(done.stdout)
    assert 0 < before["rss"] <= before["peak_rss"]
    assert during["rss"] - before["rss"] > 48 * MIB
    # the kernel syncs per-thread RSS counters lazily: allow a few pages of slack
    assert after["peak_rss"] >= during["rss"] - MIB and during["rss"] >= after["rss"]


def test_read_rss_of_another_process_and_of_a_gone_one():
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; b = bytearray(32 << 20); sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        for _ in range(200):  # until the child has allocated its block
            reading = read_rss(child.pid)
            if reading and reading["peak_rss"] > 32 * MIB:
                break
            subprocess.run(["sleep", "0.02"])
        assert reading["peak_rss"] > 32 * MIB
    finally:
        child.communicate(b"")
    assert read_rss(child.pid) is None  # reaped: no status to read


def test_monitor_metrics_name_each_process_and_sum_them():
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout.readline() == b"ready\n"  # the interpreter is up (a freshly forked child holds ~no pages)

    async def other_node():  # stands in for a Ray call to an actor on another machine, which this one cannot host
        return {"pid": 7, "rss": 100 * MIB, "peak_rss": 300 * MIB}

    processes = [
        TrackedProcess("driver", 0, "10.0.0.1"),
        TrackedProcess("policy_0", child.pid, "10.0.0.1"),
        TrackedProcess("engine_0", 7, "10.0.0.2", ask=other_node),
    ]
    try:
        metrics = asyncio.run(MemoryMonitor(processes, "10.0.0.1").sample())
    finally:
        child.communicate(b"")
    assert metrics["memory/peak_rss_mb/engine_0"] == 300 and metrics["memory/rss_mb/engine_0"] == 100
    assert metrics["memory/peak_rss_mb/driver"] >= metrics["memory/rss_mb/driver"] > 10
    assert 1 < metrics["memory/peak_rss_mb/policy_0"] < metrics["memory/peak_rss_mb/driver"]
    names = ("driver", "policy_0", "engine_0")
    assert metrics["memory/peak_rss_mb/total"] == sum(metrics[f"memory/peak_rss_mb/{n}"] for n in names)
    assert metrics["memory/rss_mb/total"] == sum(metrics[f"memory/rss_mb/{n}"] for n in names)
    # a process that exited is left out rather than reported as zero
    gone = asyncio.run(MemoryMonitor(processes[1:2], "10.0.0.1").sample())
    assert gone == {}
