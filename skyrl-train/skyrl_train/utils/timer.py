"""`PhaseTimer`: wall-clock seconds per phase of a training step, reported as `timing/<phase>` metrics."""

from __future__ import annotations

from skyrl_train.utils.compute_clock import ComputeClock


class PhaseTimer(ComputeClock):
    """Collects `timing/<phase>` seconds; `with timer("generate"): ...` adds to that phase (a `ComputeClock` whose
    phases are read, not taken)."""

    @property
    def seconds(self) -> dict[str, float]:
        """Seconds per phase so far."""
        return self._seconds

    def metrics(self) -> dict[str, float]:
        """The phases as `timing/<phase>` metrics."""
        return {f"timing/{phase}": value for phase, value in self.seconds.items()}
