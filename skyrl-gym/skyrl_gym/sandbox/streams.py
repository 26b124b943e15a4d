"""Feed the child's stdin and read its stdout, stderr and status pipe incrementally, under a deadline and an
output cap, without threads."""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

_CHUNK = 1 << 16
_POLL_S = 0.05
_STATUS_CAP = 1 << 16


@dataclass
class PumpOutcome:
    """What the pump saw: captured bytes and why it stopped."""

    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    status: bytearray = field(default_factory=bytearray)
    timed_out: bool = False
    output_truncated: bool = False
    exited: bool = False


def pump(
    stdin_fd: Optional[int],
    stdin_data: bytes,
    stdout_fd: int,
    stderr_fd: int,
    status_fd: int,
    deadline: float,
    max_output_bytes: int,
    exited: Callable[[], bool],
    exit_fd: Optional[int] = None,
    on_exit: Optional[Callable[[], None]] = None,
    drain_grace_s: float = 1.0,
) -> PumpOutcome:
    """Move data until the child's pipes close, the deadline passes, or stdout + stderr exceed the cap.

    `exit_fd` (a pidfd) becomes readable when the child exits; without it, `exited()` is polled. Once the child
    has exited, `on_exit` runs (the caller kills stragglers) and the pipes get `drain_grace_s` to reach EOF. The
    caller closes every descriptor it passed in, except that this function closes `stdin_fd` when done writing.
    """
    outcome = PumpOutcome()
    selector = selectors.DefaultSelector()
    buffers = {stdout_fd: outcome.stdout, stderr_fd: outcome.stderr, status_fd: outcome.status}
    for fd in buffers:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    view = memoryview(stdin_data)
    if stdin_fd is not None:
        if view:
            os.set_blocking(stdin_fd, False)
            selector.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            os.close(stdin_fd)
            stdin_fd = None
    if exit_fd is not None:
        selector.register(exit_fd, selectors.EVENT_READ)
    captured = 0
    drain_deadline = 0.0

    def close_stdin() -> None:
        nonlocal stdin_fd
        if stdin_fd is not None:
            selector.unregister(stdin_fd)
            os.close(stdin_fd)
            stdin_fd = None

    def note_exit() -> None:
        nonlocal drain_deadline
        if outcome.exited:
            return
        outcome.exited = True
        drain_deadline = time.monotonic() + drain_grace_s
        if exit_fd is not None:
            selector.unregister(exit_fd)
        if on_exit is not None:
            on_exit()

    try:
        while True:
            pipes_open = any(fd in buffers for fd in selector.get_map())
            now = time.monotonic()
            if outcome.exited and (not pipes_open or now >= drain_deadline):
                break
            if not outcome.exited and now >= deadline:
                outcome.timed_out = True
                break
            limit = (drain_deadline if outcome.exited else deadline) - now
            if exit_fd is None:
                limit = min(limit, _POLL_S)
            for key, _mask in selector.select(max(limit, 0.0)):
                fd = key.fd
                if fd == exit_fd:
                    note_exit()
                elif fd == stdin_fd:
                    try:
                        written = os.write(fd, view[:_CHUNK])
                        view = view[written:]
                        if not view:
                            close_stdin()
                    except BlockingIOError:
                        pass
                    except (BrokenPipeError, ConnectionResetError):
                        close_stdin()  # the program stopped reading; that is its business
                else:
                    try:
                        data = os.read(fd, _CHUNK)
                    except BlockingIOError:
                        continue
                    if not data:
                        selector.unregister(fd)
                        continue
                    if fd == status_fd:
                        outcome.status += data[: max(0, _STATUS_CAP - len(outcome.status))]
                        continue
                    room = max_output_bytes - captured
                    buffers[fd] += data[:room]
                    captured += min(len(data), room)
                    if len(data) > room:
                        outcome.output_truncated = True
            if outcome.output_truncated:
                break
            if exit_fd is None and not outcome.exited and exited():
                note_exit()
    finally:
        close_stdin()
        selector.close()
    return outcome
