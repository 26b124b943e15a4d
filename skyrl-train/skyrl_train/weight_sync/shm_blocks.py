"""The `shm` sender's blocks: named after their owner, so a block whose owner died is found and unlinked.

A POSIX shared-memory block lives (in `/dev/shm`, in RAM) until its name is unlinked, whatever happens to the process
that created it. Python's resource tracker would unlink it when that process exits, but Ray kills an actor's child
processes with it (the tracker among them), so a sender killed at the end of a run, or by `kill -9`, used to leave
its whole block behind: one model's weights of RAM per run, until the machine restarts.

So each block is named `skyrlw_<pid namespace>_<pid>_<random>` (hex; 27 characters at most with the leading `/`,
under macOS's limit of 31). `remove_orphaned_blocks` unlinks the blocks of this PID namespace whose pid no longer
runs; a new sender calls it, so a killed run's block is reclaimed by the next. Unlinking only removes the name:
a process that still maps the block keeps its mapping, and the memory is freed when the last one drops it.
"""

from __future__ import annotations

import logging
import os
import secrets
from multiprocessing import shared_memory
from pathlib import Path
from typing import Optional

logger = logging.getLogger(__name__)

BLOCK_PREFIX = "skyrlw_"
SHM_FOLDER = Path("/dev/shm")


def pid_namespace() -> int:
    """This process's PID namespace as a number (0 where `/proc` does not say, e.g. macOS): a pid means a process
    only within its namespace, and containers sharing `/dev/shm` may each have their own."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino & 0xFFFFFFFF
    except OSError:
        return 0


def create_block(nbytes: int) -> shared_memory.SharedMemory:
    """A new block of at least `nbytes` bytes (at least 1), named after this process (see the module docstring)."""
    stem = f"{BLOCK_PREFIX}{pid_namespace():x}_{os.getpid():x}_"
    while True:
        try:
            return shared_memory.SharedMemory(name=stem + secrets.token_hex(2), create=True, size=max(nbytes, 1))
        except FileExistsError:  # 1 in 65536 against a block this process still owns: draw again
            continue


def block_owner(name: str) -> Optional[tuple[int, int]]:
    """(PID namespace, pid) of a block made by `create_block`, from its name; None for any other name."""
    stem = name.lstrip("/")
    if not stem.startswith(BLOCK_PREFIX):
        return None
    parts = stem[len(BLOCK_PREFIX) :].split("_")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16)
    except ValueError:
        return None


def process_runs(pid: int) -> bool:
    """Whether a process with this pid exists in this PID namespace (whoever owns it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def remove_orphaned_blocks(folder: Path = SHM_FOLDER) -> int:
    """Unlink every block in `folder` made by a process of this PID namespace that no longer runs; return the bytes
    freed. Blocks of live processes, of other namespaces, and files not made by `create_block` are left alone."""
    if not folder.is_dir():  # no listable shared-memory folder here (e.g. macOS): nothing to sweep
        return 0
    namespace, freed, names = pid_namespace(), 0, []
    for path in folder.glob(BLOCK_PREFIX + "*"):
        owner = block_owner(path.name)
        if owner is None or owner[0] != namespace or process_runs(owner[1]):
            continue
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:  # another sender swept it first
            continue
        freed += size
        names.append(path.name)
    if names:
        logger.warning(
            "shm weight sync: unlinked %d block(s) left by killed senders (%.1f MB of RAM): %s",
            len(names),
            freed / 2**20,
            ", ".join(sorted(names)),
        )
    return freed
