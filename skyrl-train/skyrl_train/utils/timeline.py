"""A run's timeline: when the trainer, each worker rank and each engine were busy, and when weight syncs paused the
engines, as wall-clock spans recorded by the parts themselves (`trainer.record_timeline`).

- `SpanLog` is what a part keeps: thread-safe `(name, start, end)` spans in wall-clock seconds (`time.time()`, one
  clock for every process of a machine), spans closer than `merge_gap_s` merged, at most `max_spans` kept until taken.
  `ComputeClock` (worker compute, engine decoding) and `PhaseTimer` (the driver's phases) fill one each.
- `TimelineWriter` is the driver's side: after every step it takes the spans of the driver, each worker rank and
  each engine, and appends them to `timeline.jsonl` as `{"lane", "name", "start", "end"}` lines.
- `read_timeline` and `plot_timeline` turn that file into busy/idle bars per lane (`scripts/plot_timeline.py`).
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Optional


class Span(NamedTuple):
    """One busy interval of one lane: what it was doing (`name`) from `start` to `end` (wall-clock seconds)."""

    lane: str
    name: str
    start: float
    end: float


class SpanLog:
    """Thread-safe `(name, start, end)` spans of one part, taken (and cleared) by `take`.

    A span that starts within `merge_gap_s` of the end of the last one of the same name extends it (a decode loop
    records one span per call; merged, a busy stretch is one span). Only the newest `max_spans` are kept, so a part
    nobody reads costs bounded memory."""

    def __init__(self, merge_gap_s: float = 0.002, max_spans: int = 50_000) -> None:
        self.merge_gap_s = merge_gap_s
        self._spans: collections.deque = collections.deque(maxlen=max_spans)
        self._lock = threading.Lock()

    def add(self, name: str, start: float, end: float) -> None:
        """Record that `name` ran from `start` to `end`."""
        with self._lock:
            if self._spans:
                last_name, last_start, last_end = self._spans[-1]
                if last_name == name and start - last_end <= self.merge_gap_s:
                    self._spans[-1] = (name, last_start, max(end, last_end))
                    return
            self._spans.append((name, start, end))

    def take(self) -> list[tuple[str, float, float]]:
        """The spans recorded since the last `take`, oldest first."""
        with self._lock:
            spans, self._spans = list(self._spans), collections.deque(maxlen=self._spans.maxlen)
        return spans


def lane_spans(lane: str, spans: Iterable[Sequence[Any]]) -> list[Span]:
    """`(name, start, end)` triples as `Span`s of `lane`."""
    return [Span(lane, str(name), float(start), float(end)) for name, start, end in spans]


class TimelineWriter:
    """Appends each step's spans to `path` (JSON lines), from the sources the trainer registers."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        self.pending: list[Span] = []

    def add(self, spans: Iterable[Span]) -> None:
        """Queue spans for the next `write`."""
        self.pending.extend(spans)

    def write(self, step: int) -> None:
        """Append the queued spans, tagged with the step after which they were taken."""
        if not self.pending:
            return
        with self.path.open("a") as out:
            for span in sorted(self.pending, key=lambda span: span.start):
                out.write(json.dumps({"step": step, **span._asdict()}) + "\n")
        self.pending = []


def read_timeline(path: Path) -> list[Span]:
    """The spans of a `timeline.jsonl` file."""
    spans = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            spans.append(Span(row["lane"], row["name"], row["start"], row["end"]))
    return spans


def busy_fractions(spans: Sequence[Span], start: float, end: float) -> dict[str, float]:
    """Per lane, the share of [start, end] covered by its spans (overlaps counted once)."""
    covered: dict[str, float] = {}
    for lane in dict.fromkeys(span.lane for span in spans):
        intervals = sorted((max(s.start, start), min(s.end, end)) for s in spans if s.lane == lane)
        total, reach = 0.0, start
        for low, high in intervals:
            if high > low and high > reach:
                total += high - max(low, reach)
                reach = high
        covered[lane] = total / max(end - start, 1e-9)
    return covered


def plot_timeline(
    spans: Sequence[Span], path: Path, window: Optional[tuple[float, float]] = None, title: str = "Timeline"
) -> Path:
    """Draw one row of bars per lane (busy where a span is; a colour per span name) over `window` (seconds from the
    first span; default: everything), each lane labelled with its busy share of the window; writes a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    origin = min(span.start for span in spans)
    low, high = window if window is not None else (0.0, max(span.end for span in spans) - origin)
    shown = [s for s in spans if s.end - origin >= low and s.start - origin <= high]
    lanes = list(dict.fromkeys(span.lane for span in spans))
    shares = busy_fractions(spans, origin + low, origin + high)
    names = list(dict.fromkeys(span.name for span in shown))
    palette = [f"C{index % 10}" for index in range(len(names))]
    colors = dict(zip(names, palette))
    figure = Figure(figsize=(12, 0.5 * len(lanes) + 1.8), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    for row, lane in enumerate(lanes):
        for name in names:
            bars = [(s.start - origin, s.end - s.start) for s in shown if s.lane == lane and s.name == name]
            if bars:
                axes.broken_barh(bars, (row - 0.4, 0.8), color=colors[name], linewidth=0)
    axes.set_yticks(range(len(lanes)), [f"{lane} ({100 * shares[lane]:.0f}% busy)" for lane in lanes])
    axes.invert_yaxis()
    axes.set_xlim(low, high)
    axes.set_xlabel("seconds since the first recorded span")
    axes.set_title(title)
    axes.grid(True, axis="x", alpha=0.3)
    axes.legend(
        handles=[Patch(color=colors[name], label=name) for name in names],
        fontsize="small",
        loc="upper right",
        ncols=min(len(names), 6),
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


WAITING_PHASES = frozenset({"step", "generate", "wait_generation"})
"""Driver phases that are not trainer work: the whole step, and waiting for the engines' rollouts."""


class RunTimeline:
    """The driver's recorder: each step's driver phases plus the spans its sources report, written after the step.

    `sources` are `(lane, take)` pairs: `take()` returns (or, when async, resolves to) the `(name, start, end)` spans
    of that lane since its last call (a worker rank's compute, an engine's decoding, the engines' weight-sync
    pauses)."""

    def __init__(self, path: Path, sources: Sequence[tuple[str, Any]]) -> None:
        self.writer = TimelineWriter(path)
        self.sources = list(sources)

    def add_phases(self, timer: Any, lane: str = "trainer") -> None:
        """The driver's busy phases of a step (taken from `PhaseTimer.spans`), waiting phases left out."""
        self.writer.add(lane_spans(lane, [span for span in timer.spans.take() if span[0] not in WAITING_PHASES]))

    async def collect(self, step: int) -> None:
        """Take every source's spans and append everything queued to the file."""
        import inspect

        for lane, take in self.sources:
            spans = take()
            if inspect.isawaitable(spans):
                spans = await spans
            self.writer.add(lane_spans(lane, spans))
        self.writer.write(step)


def timeline_sources(groups: dict[str, Any], engines: Sequence[Any], pauses: SpanLog) -> list[tuple[str, Any]]:
    """The lanes of a Ray run: every rank of each worker group (`{role: WorkerGroup}`), every engine (a Ray proxy's
    actor, or an in-process engine's `compute_clock`) and the engines' weight-sync pauses."""
    sources: list[tuple[str, Any]] = []
    for role, group in groups.items():
        for rank, actor in enumerate(group.actors):
            sources.append((f"{role} rank {rank}", actor.take_compute_spans.remote))
    for index, engine in enumerate(engines):
        handle = getattr(engine, "handle", None)
        clock = getattr(engine, "compute_clock", None)
        if handle is not None:
            sources.append((f"engine {index}", handle.take_compute_spans.remote))
        elif clock is not None:
            sources.append((f"engine {index}", clock.spans.take))
    sources.append(("engines paused for weight sync", pauses.take))
    return sources
