"""The single compute thread: runs queued jobs, taking turns between API keys, and batches sample jobs.

Each key (owner) has its own FIFO queue and the thread serves the keys round-robin, one turn each, so one key's
thousand queued jobs delay another key's job by at most one turn. Within a key the order is submission order, which
is each model's seq_id order (the client sends a model's requests one after another; the chunks of one
forward_backward arrive together and accumulate gradients in any order). A turn runs one job, or, when the job at the
head of the turn's queue samples, a batch: the leading sample jobs of the same sampler at the head of every key's
queue, each key contributing up to `BATCH_SHARE_TOKENS` of decoding. A batch that fails is rerun job by job, so each
request gets its own outcome and one key's bad request never fails another's.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from skyrl_tx.futures import FutureStore, describe_failure

log = logging.getLogger("skyrl_tx")

BATCH_SHARE_TOKENS = 16384
"""Tokens (num_samples x (prompt + max_tokens)) one key may add to one sample batch; its first job always fits."""


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
    owner: str = ""
    """The key whose turn runs this job (a server job carries the key whose queued requests it must follow)."""
    cost: int = 1
    """Sample jobs: the tokens they may decode, counted against the key's share of a batch."""


class ComputeQueue:
    """Per-key queues and the thread that drains them. `run_batch(key, jobs)` returns one (bytes, is_proto) or
    exception per job of a sample batch."""

    def __init__(self, futures: FutureStore, run_batch: Callable[[Any, list[Job]], list[Any]]) -> None:
        self.futures = futures
        self.run_batch = run_batch
        self._queues: OrderedDict[str, deque[Job]] = OrderedDict()
        """The keys with waiting jobs, in turn order (the next turn is the first)."""
        self._waiting: dict[str, int] = {}
        self._condition = threading.Condition()
        self._stopping = False
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Start the compute thread."""
        self._thread = threading.Thread(target=self._loop, name="skyrl-tx-compute", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Let the running job finish and stop; jobs still queued stay unrun (a restart fails their futures)."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def put(self, job: Job) -> None:
        """Queue a job at the end of its key's queue."""
        with self._condition:
            self._queues.setdefault(job.owner, deque()).append(job)
            self._waiting[job.owner] = self._waiting.get(job.owner, 0) + 1
            self._condition.notify()

    def depth(self) -> int:
        """Jobs waiting, over every key."""
        with self._condition:
            return sum(self._waiting.values())

    def waiting(self, owner: str) -> int:
        """Jobs of one key waiting (not counting the one running)."""
        with self._condition:
            return self._waiting.get(owner, 0)

    def _take(self, owner: str, queue: deque[Job], taken: list[Job]) -> None:
        taken.append(queue.popleft())
        self._waiting[owner] -= 1
        if not self._waiting[owner]:
            del self._waiting[owner]

    def next_turn(self) -> Optional[list[Job]]:
        """Block until a job waits, then take the next turn's jobs (None once stopping): the head job of the next
        key, or a sample batch gathered from the heads of every key's queue."""
        with self._condition:
            while not self._queues and not self._stopping:
                self._condition.wait()
            if self._stopping:
                return None
            owner, queue = next(iter(self._queues.items()))
            head = queue[0]
            taken: list[Job] = []
            if head.batch_key is None:
                self._take(owner, queue, taken)
            else:
                for other in list(self._queues):  # this turn's key first, then the others in turn order
                    other_queue, share = self._queues[other], BATCH_SHARE_TOKENS
                    while other_queue and other_queue[0].batch_key == head.batch_key:
                        if share < other_queue[0].cost and share < BATCH_SHARE_TOKENS:
                            break
                        share -= other_queue[0].cost
                        self._take(other, other_queue, taken)
                    if not other_queue:
                        del self._queues[other]
            if owner in self._queues:
                if not self._queues[owner]:
                    del self._queues[owner]
                else:
                    self._queues.move_to_end(owner)  # its turn is over: the other keys go first
            return taken

    def _loop(self) -> None:
        while True:
            jobs = self.next_turn()
            if jobs is None:
                return
            if jobs[0].batch_key is None:
                self._run_one(jobs[0])
            else:
                self._run_group(jobs[0].batch_key, jobs)

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
            if len(group) > 1:  # find whose request it was: each job alone gets its own outcome
                log.info("a batch of %d sample requests failed (%s); rerunning them one by one", len(group), exc)
                for job in group:
                    self._run_group(key, [job])
                return
            outcomes = [exc]
        for job, outcome in zip(group, outcomes):
            if isinstance(outcome, BaseException):
                failure = describe_failure(outcome)
                self.futures.fail(job.request_id, failure["error"], failure["category"])
            else:
                self.futures.complete(job.request_id, outcome[0], outcome[1])


def _is_user(exc: BaseException) -> bool:
    return describe_failure(exc)["category"] == "user"
