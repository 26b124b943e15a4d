"""`PhaseTimer`: wall-clock seconds per named phase of a training step."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class PhaseTimer:
    """Collects `timing/<phase>` seconds; `with timer("generate"): ...` adds to that phase. `spans` holds when each
    phase ran (wall clock), for the run's timeline."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.spans: list[tuple[str, float, float]] = []

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start, wall = time.perf_counter(), time.time()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.seconds[phase] = self.seconds.get(phase, 0.0) + elapsed
            self.spans.append((phase, wall, wall + elapsed))

    def metrics(self) -> dict[str, float]:
        """The phases as `timing/<phase>` metrics."""
        return {f"timing/{phase}": value for phase, value in self.seconds.items()}
