"""benchmarks/process_cpu.py: which process is which part of a run, and CPU seconds between two snapshots."""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from process_cpu import cpu_snapshot, cpu_spent, process_kind  # noqa: E402


def test_processes_are_sorted_into_the_parts_of_a_run():
    assert process_kind(os.getpid(), "python benchmarks/async_vs_sync.py") == "driver"
    assert process_kind(1, "ray::EngineActor.generate") == "engine"
    assert process_kind(1, "ray::PolicyWorker") == "trainer workers"
    assert process_kind(1, "python -m skyrl_gym.tools.retrieval_server --corpus c.jsonl") == "API server"
    assert process_kind(1, "/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --flag") == "Ray daemons"
    assert process_kind(1, "/usr/sbin/sshd") is None


def test_the_driver_spends_what_it_burns_between_two_snapshots():
    before = cpu_snapshot()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # burn 0.3 s of this process's CPU
        pass
    spent = cpu_spent(before, cpu_snapshot())
    assert 0.25 <= spent["driver"] <= 1.0  # /proc counts in clock ticks (1/100 s); other threads may add a little
    started_later = {12345678: ("engine", 2.0)}  # a process that started between the snapshots counts from zero
    assert cpu_spent({}, started_later)["engine"] == 2.0
