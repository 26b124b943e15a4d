"""Find out whether the sandboxed process has ended, kill it with every descendant, and reap it."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from typing import Optional


def has_exited(pid: int) -> bool:
    """True once `pid` (our child) has exited; it stays unreaped, so its process group id stays reserved."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def wait_for_exit(pid: int, pidfd: Optional[int], timeout_s: float) -> bool:
    """Wait up to `timeout_s` for our child to exit (without reaping it); True if it did."""
    deadline = time.monotonic() + timeout_s
    while True:
        if has_exited(pid):
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if pidfd is not None:
            select.select([pidfd], [], [], remaining)
        else:
            time.sleep(min(remaining, 0.02))


def stop(pid: int, pidfd: Optional[int], supervised: bool, grace_s: float = 1.0) -> None:
    """End the run: ask a PID-namespace supervisor to kill and reap the program first (so no zombie is orphaned),
    then SIGKILL the whole process group."""
    if supervised and not has_exited(pid):
        with contextlib.suppress(ProcessLookupError):  # our own unreaped child: its pid cannot be recycled yet
            os.kill(pid, signal.SIGTERM)
        wait_for_exit(pid, pidfd, grace_s)
    kill_group(pid)


def kill_group(pgid: int) -> None:
    """SIGKILL the whole process group (the child was started in its own session, so pgid == its pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _pids_owned_by(uid: int) -> list[int]:
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as handle:
                for line in handle:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return pids


def kill_uid(uid: int, rounds: int = 20) -> int:
    """SIGKILL every process whose real uid is `uid` (a per-run sandbox uid), repeating until none is left.

    This catches processes that left the process group (setsid) when no PID namespace holds them. Returns how many
    kill signals were sent.
    """
    if uid == 0 or uid == os.getuid():
        raise ValueError(f"refusing to kill every process of uid {uid}")
    sent = 0
    for _ in range(rounds):
        pids = _pids_owned_by(uid)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                sent += 1
            except (ProcessLookupError, PermissionError):
                pass
    return sent


def reap(pid: int) -> tuple[Optional[int], Optional[int], Optional[float]]:
    """Wait for our child and return (exit_code, signal, cpu seconds of it and its reaped descendants)."""
    try:
        _, status, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return None, None, None
    cpu = usage.ru_utime + usage.ru_stime
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status), cpu
    return os.waitstatus_to_exitcode(status), None, cpu


def read_available(fd: int, limit: int = 1 << 16) -> bytes:
    """Read what a (non-blocking) pipe holds right now, up to `limit` bytes."""
    chunks = bytearray()
    while len(chunks) < limit:
        try:
            data = os.read(fd, limit - len(chunks))
        except (BlockingIOError, OSError):
            break
        if not data:
            break
        chunks += data
    return bytes(chunks)
