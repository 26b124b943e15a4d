"""`ScoringProcessPool`: user scoring calls in long-lived worker processes, each call with a time limit.

Why not `concurrent.futures.ProcessPoolExecutor`: it cannot stop one running call, and killing one of its processes
breaks the whole pool (every pending future fails). Here each worker is a plain subprocess
(`python -m skyrl_train.rewards.pool_worker`) in its own process group, talking over a private socket pair; a call
that outlives `timeout_s` gets its process group killed (so children the function started die too) and a fresh
process takes its place, while the other workers keep going. Processes start once and serve every later batch.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Optional

from skyrl_train.rewards.functions import RewardFunctionError

STARTUP_TIMEOUT_S = 120.0
"""Seconds a new scoring process may take to import the user's function before the pool gives up."""


@dataclass
class PoolOutcome:
    """What became of one call: `ok` with the function's `value`, or `kind` `error` / `timeout` with a `reason`."""

    ok: bool
    value: Any = None
    kind: str = ""
    reason: str = ""


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # the worker leads its own group: this reaches its children too
    process.wait()


def _exit_text(code: Optional[int]) -> str:
    if code is not None and code < 0:
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


class _Worker:
    """One scoring process and the parent's end of its socket."""

    def __init__(self, spec: str) -> None:
        parent_end, child_end = socket.socketpair()
        env = dict(os.environ)
        # the child imports `package.module` functions from wherever this process could
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "skyrl_train.rewards.pool_worker", str(child_end.fileno()), spec],
            pass_fds=(child_end.fileno(),),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        child_end.close()
        self.connection = Connection(parent_end.detach())
        self.started = time.monotonic()
        self.ready = False
        self.key: Optional[int] = None
        self.deadline = 0.0

    @property
    def busy(self) -> bool:
        return self.key is not None

    def stop(self) -> None:
        """Kill the process group and close the socket."""
        _kill_group(self.process)
        self.connection.close()


def _stop_all(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.stop()


class ScoringProcessPool:
    """`num_workers` processes that call the function `spec` names; `map(calls)` returns one `PoolOutcome` per call.

    A call that raises is an `error` outcome with the exception's type and message; one that runs past `timeout_s`
    is a `timeout` outcome and its process (group) is killed and replaced; a process that dies mid-call (segfault,
    `os._exit`) is an `error` outcome saying how it ended. A function that cannot be imported raises
    `RewardFunctionError` with the child's traceback.
    """

    def __init__(self, spec: str, num_workers: int, timeout_s: float) -> None:
        if num_workers < 1:
            raise ValueError(f"reward.num_workers must be at least 1, got {num_workers}")
        if not timeout_s > 0:
            raise ValueError(f"reward.timeout_s must be positive, got {timeout_s}")
        self.spec, self.num_workers, self.timeout_s = spec, num_workers, timeout_s
        self._workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _stop_all, self._workers)
        self.num_killed = 0
        """Processes killed for running past `timeout_s` since the pool started."""

    def worker_pids(self) -> list[int]:
        """Process ids of the current scoring processes."""
        return [worker.process.pid for worker in self._workers]

    def _replace(self, worker: _Worker) -> None:
        worker.stop()
        self._workers[self._workers.index(worker)] = _Worker(self.spec)

    def _start(self) -> None:
        while len(self._workers) < self.num_workers:
            self._workers.append(_Worker(self.spec))

    def map(self, calls: list[dict[str, Any]]) -> list[PoolOutcome]:
        """Run `function(**call)` for every call, at most `num_workers` at once; outcomes in call order."""
        self._start()
        results: list[Optional[PoolOutcome]] = [None] * len(calls)
        pending = collections.deque(range(len(calls)))
        while pending or any(worker.busy for worker in self._workers):
            self._assign(pending, calls)
            waiting = [worker for worker in self._workers if worker.busy or not worker.ready]
            now = time.monotonic()
            deadlines = [w.deadline if w.ready else w.started + STARTUP_TIMEOUT_S for w in waiting]
            by_connection = {worker.connection: worker for worker in waiting}
            timeout = max(0.0, min(deadlines) - now) if deadlines else 0.0
            for connection in wait(list(by_connection), timeout=timeout):
                self._receive(by_connection[connection], results)
            self._enforce_deadlines(results)
        return [
            result if result is not None else PoolOutcome(False, kind="error", reason="never scored")
            for result in results
        ]

    def _assign(self, pending: collections.deque, calls: list[dict[str, Any]]) -> None:
        for worker in list(self._workers):
            if not pending or not worker.ready or worker.busy:
                continue
            if worker.process.poll() is not None:  # died while idle: start another
                self._replace(worker)
                continue
            key = pending.popleft()
            try:
                worker.connection.send((key, calls[key]))
            except OSError:
                pending.appendleft(key)
                self._replace(worker)
                continue
            worker.key, worker.deadline = key, time.monotonic() + self.timeout_s

    def _receive(self, worker: _Worker, results: list[Optional[PoolOutcome]]) -> None:
        try:
            message = worker.connection.recv()
        except (EOFError, OSError):
            code = worker.process.wait()
            if not worker.ready:
                self.close()
                raise RewardFunctionError(
                    f"reward.function={self.spec!r}: a scoring process {_exit_text(code)} before it was ready"
                ) from None
            if worker.busy:
                results[worker.key] = PoolOutcome(False, kind="error", reason=f"the scoring process {_exit_text(code)}")
            self._replace(worker)
            return
        if not worker.ready:
            if message[0] != "ready":
                self.close()
                raise RewardFunctionError(
                    f"reward.function={self.spec!r} failed to load in a scoring process:\n{message[1]}"
                )
            worker.ready = True
            return
        key, ok, payload = message
        results[key] = PoolOutcome(True, payload) if ok else PoolOutcome(False, kind="error", reason=payload)
        worker.key = None

    def _enforce_deadlines(self, results: list[Optional[PoolOutcome]]) -> None:
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.busy and now >= worker.deadline:
                reason = f"did not return within reward.timeout_s={self.timeout_s} s; its process was killed"
                results[worker.key] = PoolOutcome(False, kind="timeout", reason=reason)
                self.num_killed += 1
                self._replace(worker)
            elif not worker.ready and now >= worker.started + STARTUP_TIMEOUT_S:
                self.close()
                raise RewardFunctionError(
                    f"reward.function={self.spec!r}: a scoring process did not finish importing it within "
                    f"{STARTUP_TIMEOUT_S} s"
                )

    def close(self) -> None:
        """Kill every scoring process (and anything it started); a later `map` starts new ones."""
        _stop_all(self._workers)
        self._workers.clear()
