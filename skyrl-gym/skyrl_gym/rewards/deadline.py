"""Run a function with a wall-clock deadline that works from any thread (no signals), interrupting it when late.

`signal.alarm` (what math-verify uses for its own timeouts) only works in the main thread, but rewards are computed
inside `guarded_step`'s thread pool and inside Ray actors. Here the work runs in a fresh daemon thread; when the
deadline passes the caller gets `DeadlineExceeded` at once and the worker is interrupted by an asynchronous
exception, which stops pure-Python work such as sympy simplification at its next bytecode. A single long C call
(e.g. a huge integer power) cannot be interrupted this way, which is why callers also screen inputs by size.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class DeadlineExceeded(TimeoutError):
    """The function did not finish within its deadline; it was interrupted and its result discarded."""


class _Interrupted(BaseException):
    """Raised asynchronously inside a late worker; a BaseException so `except Exception` in libraries lets it pass."""


def _interrupt_thread(thread: threading.Thread) -> None:
    """Schedule `_Interrupted` to be raised in `thread` at its next bytecode boundary."""
    if thread.ident is None:
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(_Interrupted))


def run_with_deadline(function: Callable[..., T], timeout_s: float, *args: Any, **kwargs: Any) -> T:
    """Return `function(*args, **kwargs)`, or raise `DeadlineExceeded` if it takes longer than `timeout_s` seconds.

    Exceptions raised by `function` propagate to the caller unchanged. `timeout_s` must be positive.
    """
    if not timeout_s > 0:
        raise ValueError(f"run_with_deadline: timeout_s must be a positive number of seconds, got {timeout_s!r}")
    lock = threading.Lock()
    state: dict[str, Any] = {"finished": False, "interrupted": False}

    def worker() -> None:
        try:
            try:
                state["value"] = function(*args, **kwargs)
            except _Interrupted:
                raise
            except BaseException as exc:  # handed to the caller below
                state["error"] = exc
            with lock:
                state["finished"] = True
        except _Interrupted:
            pass  # the caller already gave up on this call

    thread = threading.Thread(target=worker, name="skyrl-gym-deadline", daemon=True)
    thread.start()
    thread.join(timeout_s)
    with lock:
        if not state["finished"]:
            state["interrupted"] = True
            _interrupt_thread(thread)
    if state["interrupted"]:
        name = getattr(function, "__name__", repr(function))
        raise DeadlineExceeded(f"{name} did not finish within {timeout_s} s")
    if "error" in state:
        raise state["error"]
    return state["value"]
