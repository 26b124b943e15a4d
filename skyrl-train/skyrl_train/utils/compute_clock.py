"""`ComputeClock`: seconds an actor spends in its model-compute methods, for the framework-overhead benchmark.

Workers time `forward`, `forward_backward` and `optim_step` (inside the actor: model math, FSDP collectives and
micro-batching, but not Ray scheduling, argument transfer or the driver); engines time their batched decode calls.
`take()` returns the seconds per call name since the previous `take()` and starts over, so a caller can read one
training step's compute after the step; `spans` keeps when each call ran (wall clock) for the run's timeline
(`utils.timeline`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from skyrl_train.utils.timeline import SpanLog

Method = TypeVar("Method", bound=Callable[..., Any])


class ComputeClock:
    """Thread-safe accumulator of seconds per name (`with clock("forward"): ...`)."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._lock = threading.Lock()
        self.spans = SpanLog()
        """When each call ran (wall clock), for the run's timeline."""

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start, wall = time.perf_counter(), time.time()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:
                self._seconds[name] = self._seconds.get(name, 0.0) + elapsed
            self.spans.add(name, wall, wall + elapsed)

    def take(self) -> dict[str, float]:
        """Seconds per name since the last `take()`; the clock starts over."""
        with self._lock:
            seconds, self._seconds = self._seconds, {}
        return seconds


def timed_compute(name: str) -> Callable[[Method], Method]:
    """Decorate a method of an object with a `compute_clock` attribute so its calls count as compute `name`."""

    def decorate(method: Method) -> Method:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            with self.compute_clock(name):
                return method(self, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
