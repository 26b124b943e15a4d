"""Futures: submitting a request (deduplicated on its target and seq_id), storing its result, and waking the
long-polls of `retrieve_future`.

A request is a row in `futures` (state pending) plus a job on the compute queue. Resubmitting the same target and
seq_id returns the first request's id when the payload is the same and raises `Conflict` when it differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Optional

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from skyrl_tx.db import DONE, FAILED, PENDING, Database, FutureRow, utcnow


class Conflict(Exception):
    """The same target and seq_id was submitted before with a different payload (HTTP 409)."""


def payload_hash(payload: bytes) -> str:
    """The deduplication hash of a request body."""
    return hashlib.sha256(payload).hexdigest()


class Notifier:
    """Wakes the `retrieve_future` long-polls of a request when the compute thread finishes it. An event exists only
    while someone polls its request: `watch` makes it and drops it when the last poller leaves."""

    def __init__(self) -> None:
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._events: dict[int, tuple[asyncio.Event, list[int]]] = {}
        self._lock = threading.Lock()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Remember the server's event loop (the events live on it)."""
        self._loop = loop

    @contextlib.contextmanager
    def watch(self, request_id: int) -> Iterator[asyncio.Event]:
        """The event set when `request_id` finishes, for the duration of one poll (enter it before reading the
        request's state, so no wake-up is lost)."""
        with self._lock:
            entry = self._events.get(request_id)
            if entry is None:
                entry = self._events[request_id] = (asyncio.Event(), [0])
            entry[1][0] += 1
        try:
            yield entry[0]
        finally:
            with self._lock:
                entry[1][0] -= 1
                if not entry[1][0] and self._events.get(request_id) is entry:
                    del self._events[request_id]

    def watched(self) -> int:
        """How many request ids have an event (polls in progress)."""
        with self._lock:
            return len(self._events)

    def _set(self, request_id: int) -> None:
        with self._lock:
            entry = self._events.pop(request_id, None)
        if entry is not None:
            entry[0].set()

    def finished(self, request_id: int) -> None:
        """Called from any thread when a request finished."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._set, request_id)


class FutureStore:
    """The futures table: submit, complete, fail and read."""

    def __init__(self, db: Database, notifier: Notifier) -> None:
        self.db = db
        self.notifier = notifier

    def submit(
        self,
        request_type: str,
        owner: str,
        target_id: Optional[str],
        seq_id: Optional[int],
        digest: str,
        admit: Optional[Callable[[], None]] = None,
    ) -> tuple[int, bool]:
        """Insert a pending future; returns (request_id, is_new). A duplicate (target_id, seq_id) with the same
        digest returns the first request's id, or, when that request failed on the server's side (a crash, a
        restart), resets it to pending and returns it as new so the caller runs it again; another digest raises
        `Conflict`. `admit` runs before anything new is stored and may refuse it (a quota)."""
        if target_id is not None and seq_id is not None:
            existing = self._existing(target_id, seq_id)
            if existing is not None:
                return self._dedup(existing, digest, target_id, seq_id, admit)
        if admit is not None:
            admit()
        try:
            with self.db.session() as s:
                row = FutureRow(
                    request_type=request_type,
                    owner=owner,
                    target_id=target_id,
                    seq_id=seq_id,
                    payload_hash=digest,
                    status=PENDING,
                )
                s.add(row)
                s.flush()
                return row.request_id, True
        except IntegrityError:  # a concurrent resubmission won the insert
            existing = self._existing(target_id, seq_id)
            if existing is None:
                raise
            return self._dedup(existing, digest, target_id, seq_id, None)

    def _existing(self, target_id: Optional[str], seq_id: Optional[int]) -> Optional[FutureRow]:
        with self.db.session() as s:
            return s.scalars(
                select(FutureRow).where(FutureRow.target_id == target_id, FutureRow.seq_id == seq_id)
            ).first()

    def _dedup(
        self,
        row: FutureRow,
        digest: str,
        target_id: Optional[str],
        seq_id: Optional[int],
        admit: Optional[Callable[[], None]],
    ) -> tuple[int, bool]:
        if row.payload_hash != digest:
            raise Conflict(
                f"seq_id {seq_id} of {target_id} was already submitted with a different payload "
                f"(request {row.request_id}); a resubmission must repeat the same request"
            )
        if row.status != FAILED or row.error_category != "server":
            return row.request_id, False
        if admit is not None:
            admit()
        with self.db.session() as s:  # only one of two concurrent resubmissions wins the reset
            reset = s.execute(
                update(FutureRow)
                .where(FutureRow.request_id == row.request_id, FutureRow.status == FAILED)
                .values(status=PENDING, error=None, error_category=None, finished_at=None)
            )
        return row.request_id, reset.rowcount == 1

    def complete(self, request_id: int, result: bytes, is_proto: bool) -> None:
        """Store the result of a finished request and wake its pollers."""
        with self.db.session() as s:
            row = s.get(FutureRow, request_id)
            row.status, row.result, row.result_is_proto, row.finished_at = DONE, result, is_proto, utcnow()
        self.notifier.finished(request_id)

    def fail(self, request_id: int, error: str, category: str) -> None:
        """Mark a request failed (`category` user | server) and wake its pollers."""
        with self.db.session() as s:
            row = s.get(FutureRow, request_id)
            row.status, row.error, row.error_category, row.finished_at = FAILED, error, category, utcnow()
        self.notifier.finished(request_id)

    def get(self, request_id: int) -> Optional[FutureRow]:
        """The row of a request, or None."""
        with self.db.session() as s:
            return s.get(FutureRow, request_id)

    def pending_count(self) -> int:
        """How many requests wait for the compute thread."""
        with self.db.session() as s:
            return int(s.scalar(select(func.count()).select_from(FutureRow).where(FutureRow.status == PENDING)) or 0)


def describe_failure(exc: BaseException) -> dict[str, Any]:
    """The `{error, category}` body of a failed request: user errors for bad input, server errors otherwise."""
    from skyrl_tx.losses import LossInputError
    from skyrl_tx.wire import WireError

    category = "user" if isinstance(exc, (WireError, LossInputError, UserError)) else "server"
    return {"error": f"{type(exc).__name__}: {exc}", "category": category}


class UserError(ValueError):
    """A request the server understood but cannot honour because of what the user asked (category user)."""
