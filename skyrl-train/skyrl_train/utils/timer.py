"""`PhaseTimer`: wall-clock seconds per named phase of a training step."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class PhaseTimer:
    """Collects `timing/<phase>` seconds; `with timer("generate"): ...` adds to that phase."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        """The phases as `timing/<phase>` metrics."""
        return {f"timing/{phase}": value for phase, value in self.seconds.items()}
