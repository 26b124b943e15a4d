"""What the benchmarks read about processes from `/proc` (Linux): a process's proportional set size and its
descendants."""

from __future__ import annotations

import os
from typing import Optional


def read_pss_mb(pid: Optional[int] = None) -> Optional[float]:
    """Proportional set size of `pid` (default: this process) in MB: its resident pages, each page shared with
    other processes counted as its share (`/proc/<pid>/smaps_rollup`); None when it cannot be read."""
    try:
        with open(f"/proc/{pid if pid is not None else 'self'}/smaps_rollup", "rb") as handle:
            for line in handle:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def process_tree(root: int) -> list[int]:
    """`root`'s descendants (from `/proc`, on Linux), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                parent = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, queue = [], list(children.get(root, []))
    while queue:
        pid = queue.pop(0)
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found
