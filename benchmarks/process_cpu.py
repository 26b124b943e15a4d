"""CPU seconds of this machine's processes by the part of a run they are (driver, engines, trainer workers, the
benchmark's API server, Ray's own daemons), read from `/proc` (Linux): what a run that fills the cores spends its
cores on.

    before = cpu_snapshot()
    ...                                   # the training loop
    spent = cpu_spent(before, cpu_snapshot())   # {"driver": 12.3, "engine": 20.1, ...}
"""

from __future__ import annotations

import os
from pathlib import Path

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
KINDS = ("driver", "engine", "trainer workers", "API server", "Ray daemons")
"""The parts, in table order."""


def process_kind(pid: int, command: str) -> str | None:
    """The part of a run process `pid` with command line `command` is (None: not part of it)."""
    if pid == os.getpid():
        return "driver"
    if command.startswith("ray::EngineActor"):
        return "engine"
    if command.startswith(("ray::PolicyWorker", "ray::RefWorker", "ray::CriticWorker", "ray::RewardWorker")):
        return "trainer workers"
    if "retrieval_server" in command:
        return "API server"
    if any(
        name in command for name in ("raylet", "gcs_server", "ray/dashboard", "log_monitor", "ray::", "ray/_private")
    ):
        return "Ray daemons"
    return None


def cpu_snapshot() -> dict[int, tuple[str, float]]:
    """pid -> (kind, CPU seconds so far: user + system) of every process that is part of a run."""
    snapshot = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        kind = process_kind(int(entry.name), command)
        if kind is not None:
            # after the command name: state is field 3 of stat, utime and stime are fields 14 and 15
            snapshot[int(entry.name)] = (kind, (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND)
    return snapshot


def cpu_spent(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds each kind spent between two snapshots (a process that started in between counts from zero; one
    that ended in between is missing from `after` and not counted)."""
    spent = dict.fromkeys(KINDS, 0.0)
    for pid, (kind, seconds) in after.items():
        spent[kind] += seconds - before.get(pid, (kind, 0.0))[1]
    return spent
