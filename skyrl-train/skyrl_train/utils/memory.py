"""Resident memory of a run's processes (the driver, every worker rank and engine), logged each step as `memory/*`.

Linux keeps each process's peak resident set size (`VmHWM` in `/proc/<pid>/status`) next to its current one
(`VmRSS`). The driver reads both straight from `/proc` for the processes on its own node (a few microseconds each, no
call to the actor); a process on another node reports its own through one Ray call (`runtime_info` of a worker,
`engine_info` of an engine). Resident sizes count the pages a process shares with others (torch's libraries, a
shared-memory weight block) in each of them, so the sum over processes is an upper bound of what they take together.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
from dataclasses import dataclass
from typing import Any, Optional

MIB = 2**20


def read_rss(pid: Optional[int] = None) -> Optional[dict[str, int]]:
    """`{"rss": bytes, "peak_rss": bytes}` of process `pid` (default: this one) from `/proc`, or None when it has no
    readable status (gone, or not Linux)."""
    path = f"/proc/{pid if pid is not None else 'self'}/status"
    try:
        with open(path, "rb") as handle:
            status = handle.read()
    except OSError:
        if pid is None and sys.platform != "linux":  # macOS: ru_maxrss in bytes, no current size
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return {"rss": peak, "peak_rss": peak}
        return None
    values = {}
    for line in status.splitlines():
        if line.startswith(b"VmRSS:"):
            values["rss"] = int(line.split()[1]) * 1024
        elif line.startswith(b"VmHWM:"):
            values["peak_rss"] = int(line.split()[1]) * 1024
    return values if len(values) == 2 else None


@dataclass
class TrackedProcess:
    """One process of the run: its metric name (`driver`, `policy_0`, `engine_1`, ...), pid and node."""

    name: str
    pid: int
    node_ip: str
    ask: Optional[Any] = None
    """For a process on another node: a no-argument callable returning an awaitable of its info dict (which holds
    `rss` and `peak_rss`)."""


class MemoryMonitor:
    """The resident memory of the run's processes, as step metrics: `memory/peak_rss_mb/<process>` (the peak since
    the process started), `memory/rss_mb/<process>` (now), and the sums over processes, `memory/peak_rss_mb/total`
    and `memory/rss_mb/total`."""

    def __init__(self, processes: list[TrackedProcess], here_ip: str) -> None:
        self.processes = processes
        self.here_ip = here_ip

    @classmethod
    async def for_run(cls, groups: dict[str, Any], engines: list[Any], here: str) -> MemoryMonitor:
        """The driver (this process, on node `here`), each rank of `groups` (role name -> `WorkerGroup`, None
        skipped) and each engine proxy (with a Ray `handle`); one Ray call per actor finds its pid and node."""
        processes = [TrackedProcess("driver", os.getpid(), here)]
        for role, group in groups.items():
            if group is None:
                continue
            infos = await asyncio.gather(*(actor.runtime_info.remote() for actor in group.actors))
            for rank, (actor, info) in enumerate(zip(group.actors, infos)):
                ask = actor.runtime_info.remote
                processes.append(TrackedProcess(f"{role}_{rank}", int(info["pid"]), str(info["node_ip"]), ask))
        handles = [getattr(engine, "handle", None) for engine in engines]
        live = [handle for handle in handles if handle is not None]
        infos = await asyncio.gather(*(handle.engine_info.remote() for handle in live))
        for index, (handle, info) in enumerate(zip(live, infos)):
            processes.append(
                TrackedProcess(f"engine_{index}", int(info["pid"]), str(info["node_ip"]), handle.engine_info.remote)
            )
        return cls(processes, here)

    async def sample(self) -> dict[str, float]:
        """The `memory/*` metrics now (a process that exited or cannot be read is left out)."""
        readings: dict[str, Optional[dict[str, int]]] = {}
        remote = []
        for process in self.processes:
            if process.node_ip == self.here_ip or process.ask is None:
                readings[process.name] = read_rss(process.pid if process.name != "driver" else None)
            else:
                remote.append(process)
        if remote:
            answers = await asyncio.gather(*(process.ask() for process in remote), return_exceptions=True)
            for process, answer in zip(remote, answers):
                usable = isinstance(answer, dict) and "peak_rss" in answer
                readings[process.name] = {"rss": answer["rss"], "peak_rss": answer["peak_rss"]} if usable else None
        metrics: dict[str, float] = {}
        for name, reading in readings.items():
            if reading is None:
                continue
            metrics[f"memory/peak_rss_mb/{name}"] = reading["peak_rss"] / MIB
            metrics[f"memory/rss_mb/{name}"] = reading["rss"] / MIB
        if metrics:
            metrics["memory/peak_rss_mb/total"] = sum(v for k, v in metrics.items() if k.startswith("memory/peak_"))
            metrics["memory/rss_mb/total"] = sum(
                v for k, v in metrics.items() if k.startswith("memory/rss_mb/") and not k.endswith("/total")
            )
        return metrics
