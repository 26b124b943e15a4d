"""The single compute thread: runs queued jobs in submission order and batches runs of sample jobs.

Submission order is each model's seq_id order (the client sends a model's requests one after another; the chunks of
one forward_backward arrive together and accumulate gradients in any order). Sample jobs waiting together are
grouped by sampler and decoded as batches; everything else runs one job at a time.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from skyrl_tx.futures import FutureStore, describe_failure

log = logging.getLogger("skyrl_tx")


@dataclass
class Job:
    """One request for the compute thread. `run()` returns (result bytes, is_proto); sample jobs instead carry a
    `batch_key` and are run together by `run_batch`."""

    request_id: Optional[int]
    """None for the server's own jobs (unloading an adapter): they have no future."""
    kind: str
    run: Optional[Callable[[], tuple[bytes, bool]]] = None
    batch_key: Any = None
    payload: Any = None


@dataclass
class ComputeQueue:
    """A queue and the thread that drains it. `run_batch(key, jobs)` returns one (bytes, is_proto) or exception
    per job of a sample batch."""

    futures: FutureStore
    run_batch: Callable[[Any, list[Job]], list[Any]]
    _queue: queue.Queue[Optional[Job]] = field(default_factory=queue.Queue)
    _thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Start the compute thread."""
        self._thread = threading.Thread(target=self._loop, name="skyrl-tx-compute", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish the queued jobs' current one and stop."""
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=30)

    def put(self, job: Job) -> None:
        """Queue a job."""
        self._queue.put(job)

    def depth(self) -> int:
        """Jobs waiting."""
        return self._queue.qsize()

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs = [first]
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                jobs.append(more)
            self._run_in_order(jobs)

    def _run_in_order(self, jobs: list[Job]) -> None:
        index = 0
        while index < len(jobs):
            job = jobs[index]
            if job.batch_key is None:
                self._run_one(job)
                index += 1
                continue
            end = index
            while end < len(jobs) and jobs[end].batch_key is not None:
                end += 1
            groups: dict[Any, list[Job]] = {}
            for sample in jobs[index:end]:
                groups.setdefault(sample.batch_key, []).append(sample)
            for key, group in groups.items():
                self._run_group(key, group)
            index = end

    def _run_one(self, job: Job) -> None:
        try:
            assert job.run is not None
            result, is_proto = job.run()
        except Exception as exc:  # a failed job fails its future, never the thread
            log.info("request %s (%s) failed: %s", job.request_id, job.kind, exc, exc_info=not _is_user(exc))
            if job.request_id is not None:
                failure = describe_failure(exc)
                self.futures.fail(job.request_id, failure["error"], failure["category"])
            return
        if job.request_id is not None:
            self.futures.complete(job.request_id, result, is_proto)

    def _run_group(self, key: Any, group: list[Job]) -> None:
        try:
            outcomes = self.run_batch(key, group)
        except Exception as exc:
            outcomes = [exc] * len(group)
        for job, outcome in zip(group, outcomes):
            if isinstance(outcome, BaseException):
                failure = describe_failure(outcome)
                self.futures.fail(job.request_id, failure["error"], failure["category"])
            else:
                self.futures.complete(job.request_id, outcome[0], outcome[1])


def _is_user(exc: BaseException) -> bool:
    return describe_failure(exc)["category"] == "user"
