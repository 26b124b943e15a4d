"""`SandboxResult`: what one sandboxed run did and which defence layers were active while it ran."""

from __future__ import annotations

import signal as signal_module
from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of `run_python`.

    `exit_code` is None when the program was ended by a signal (`signal`). `timed_out` covers both the wall-clock
    limit and the CPU-time limit; `memory_exceeded` means the memory limit stopped the program; `output_truncated`
    means stdout + stderr hit the cap (the program was killed and the kept output is cut at the cap). `layers` maps
    each attempted defence layer to whether it was really active; `layer_notes` says why one was not. `error` is set
    when the sandbox itself failed (the program may not have run at all).
    """

    exit_code: Optional[int]
    signal: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool
    memory_exceeded: bool
    output_truncated: bool
    wall_time_s: float
    cpu_time_s: Optional[float] = None
    layers: dict[str, bool] = field(default_factory=dict)
    layer_notes: dict[str, str] = field(default_factory=dict)
    landlock_abi: int = 0
    uid: Optional[int] = None
    sandbox_dir: str = ""
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        """True when the program ran to completion with exit code 0 inside every limit."""
        return (
            self.error is None
            and self.exit_code == 0
            and not (self.timed_out or self.memory_exceeded or self.output_truncated)
        )

    @property
    def signal_name(self) -> Optional[str]:
        """The terminating signal's name (e.g. 'SIGKILL'), or None."""
        if self.signal is None:
            return None
        try:
            return signal_module.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"

    @property
    def active_layers(self) -> list[str]:
        """The names of the layers that were active, sorted."""
        return sorted(name for name, active in self.layers.items() if active)

    def describe_exit(self) -> str:
        """A short human description of how the program ended."""
        if self.error:
            return f"sandbox error: {self.error}"
        if self.output_truncated:
            return "output limit exceeded"
        if self.timed_out:
            return "time limit exceeded"
        if self.memory_exceeded:
            return "memory limit exceeded"
        if self.signal is not None:
            return f"killed by {self.signal_name}"
        return f"exit code {self.exit_code}"
