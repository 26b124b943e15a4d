"""The `console` tracking backend: a tqdm bar over training steps plus one compact summary line per logged step.

Readable in a terminal and in a CI log alike. On a terminal the bar redraws in place and the summary lines scroll
above it. Elsewhere (CI logs, files) every bar redraw becomes a plain line, at most one per `mininterval` (30 s),
so a log holds a handful of bar lines, no carriage-return clutter. Each logged step prints one line such as

    step 12/100 | reward/mean 0.4375 | eval/arithmetic/pass_at_1 0.52 | timing/step 1.81
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from tqdm import tqdm

from skyrl_train.utils.plain_values import format_number
from skyrl_train.utils.tracking import TrackingBackend, register_tracking_backend

DEFAULT_CONSOLE_KEYS = (
    "reward/mean",
    "eval/*/pass_at_1",
    "policy/loss",
    "policy/grad_norm",
    "critic/loss",
    "timing/step",
)
"""Metric names (glob patterns) shown by default, in this order; `["*"]` shows every metric."""

TERMINAL_MININTERVAL = 0.5
"""Seconds between bar redraws on a terminal."""

LOG_FILE_MININTERVAL = 30.0
"""Seconds between bar redraws when the stream is not a terminal (CI logs, files)."""


def select_metrics(metrics: Mapping[str, float], patterns: Sequence[str]) -> dict[str, float]:
    """The metrics whose names match `patterns` (globs), ordered by the first pattern each matches, then by name."""
    chosen: dict[str, float] = {}
    for pattern in patterns:
        for name in sorted(fnmatch.filter(metrics, pattern)):
            chosen.setdefault(name, metrics[name])
    return chosen


def summary_line(step: int, total_steps: int | None, metrics: Mapping[str, float]) -> str:
    """`step N[/T] | name value | ...` for the given (already selected) metrics."""
    head = f"step {step}/{total_steps}" if total_steps else f"step {step}"
    return " | ".join([head, *(f"{name} {format_number(value)}" for name, value in metrics.items())])


class _LineStream:
    """Wraps a non-terminal stream so tqdm's carriage-return redraws arrive as whole lines and blank clears vanish."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        for piece in re.split(r"[\r\n]", text):
            if piece.strip():
                self.stream.write(piece.rstrip() + "\n")

    def flush(self) -> None:
        self.stream.flush()


@register_tracking_backend("console")
class ConsoleBackend(TrackingBackend):
    """Progress bar over steps whose postfix shows the selected metrics, and one summary line per `log` call.

    Options (via `Tracker(backend_options={"console": {...}})`): `total_steps` (bar length), `keys` (glob
    patterns of metrics to show), `mininterval` (seconds between bar redraws; default by terminal or not),
    `progress_bar` (False for summary lines only), `stream` (default stdout).
    """

    def start(
        self,
        total_steps: int | None = None,
        keys: Sequence[str] = DEFAULT_CONSOLE_KEYS,
        mininterval: float | None = None,
        progress_bar: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        """Open the progress bar (see the class docstring for the options)."""
        if isinstance(keys, str):
            raise TypeError(f"console option keys must be a list of metric name patterns, got the string {keys!r}")
        self.stream = stream if stream is not None else sys.stdout
        self.keys = list(keys)
        self.total_steps = total_steps
        self.interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        if mininterval is None:
            mininterval = TERMINAL_MININTERVAL if self.interactive else LOG_FILE_MININTERVAL
        self.bar = tqdm(
            total=total_steps,
            desc=self.run_name,
            unit="step",
            file=self.stream if self.interactive else _LineStream(self.stream),
            mininterval=mininterval,
            dynamic_ncols=self.interactive,
            disable=not progress_bar,
            leave=True,
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Move the bar to `step` with the metrics as postfix, and print the summary line for `step`."""
        shown = select_metrics(metrics, self.keys)
        line = summary_line(step, self.total_steps, shown)
        if not self.bar.disable:
            self.bar.set_postfix({name: format_number(value) for name, value in shown.items()}, refresh=False)
            if step > self.bar.n:
                self.bar.update(step - self.bar.n)
        if self.interactive and not self.bar.disable:
            self.bar.write(line, file=self.stream)  # above the bar, which is then redrawn
        else:
            print(line, file=self.stream, flush=True)

    def finish(self) -> None:
        """Draw the bar one last time and close it."""
        self.bar.close()
