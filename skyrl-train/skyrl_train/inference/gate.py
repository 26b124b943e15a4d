"""`WeightGate`: lets endpoint requests and weight updates take turns across threads and event loops.

Requests hold the gate open while they generate (many at once); the trainer closes it around anything that changes
what the engines serve (sleep, a weight sync): closing waits for running requests to finish and holds new ones until
the gate opens again, so no request ever runs on half-updated weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable


class WeightGate:
    """A readers-writer gate (writers first): `serving()` for requests, `closed()` for weight changes."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._serving = 0
        self._closing = 0

    def _enter_serving(self) -> None:
        with self._condition:
            self._condition.wait_for(lambda: self._closing == 0)
            self._serving += 1

    def _leave_serving(self) -> None:
        with self._condition:
            self._serving -= 1
            self._condition.notify_all()

    def _close(self) -> None:
        with self._condition:
            self._closing += 1  # new requests wait from now on
            self._condition.wait_for(lambda: self._serving == 0)

    def _open(self) -> None:
        with self._condition:
            self._closing -= 1
            self._condition.notify_all()

    @property
    def is_closed(self) -> bool:
        """True while a weight change holds the gate."""
        return self._closing > 0

    async def close(self) -> None:
        """Keep requests out from now on, once the running ones finished (pair with `open`)."""
        await asyncio.to_thread(self._close)

    def open(self) -> None:
        """Let requests in again (after `close`)."""
        self._open()

    @property
    def requests_in_flight(self) -> int:
        """Requests holding the gate now."""
        return self._serving

    def serving(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold the gate open for one request (waits while it is closed)."""
        return _held(self._enter_serving, self._leave_serving)

    def closed(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Keep requests out (after the running ones finish) for the body of the block."""
        return _held(self._close, self._open)


@contextlib.asynccontextmanager
async def _held(enter: Callable[[], None], leave: Callable[[], None]) -> AsyncIterator[None]:
    """Run `enter` (it may block on the gate's condition) in a worker thread, then the body, then `leave` however
    the body ends."""
    await asyncio.to_thread(enter)
    try:
        yield
    finally:
        leave()
