"""The run timeline: spans merge and are taken once, busy shares count overlaps once, the file round-trips and draws."""

import asyncio
import json

import pytest

from skyrl_train.utils.compute_clock import ComputeClock
from skyrl_train.utils.timeline import (
    RunTimeline,
    Span,
    SpanLog,
    busy_fractions,
    plot_timeline,
    read_timeline,
)
from skyrl_train.utils.timer import PhaseTimer


def test_spans_close_together_merge_and_take_empties_the_log():
    log = SpanLog(merge_gap_s=0.01)
    log.add("generate", 0.0, 1.0)
    log.add("generate", 1.005, 2.0)  # within the gap: one busy stretch
    log.add("generate", 3.0, 4.0)
    log.add("other", 4.001, 5.0)  # another name never merges
    assert log.take() == [("generate", 0.0, 2.0), ("generate", 3.0, 4.0), ("other", 4.001, 5.0)]
    assert log.take() == []


def test_a_log_nobody_reads_keeps_only_the_newest_spans():
    log = SpanLog(merge_gap_s=0.0, max_spans=3)
    for start in range(10):
        log.add("x", float(start), start + 0.5)
    assert [start for _, start, _ in log.take()] == [7.0, 8.0, 9.0]


def test_compute_clock_and_phase_timer_record_wall_clock_spans():
    clock, timer = ComputeClock(), PhaseTimer()
    with clock("forward"), timer("train_policy"):
        pass
    ((name, start, end),) = clock.spans.take()
    assert name == "forward" and 0 <= end - start < 1
    assert [phase for phase, _, _ in timer.spans.take()] == ["train_policy"]
    assert clock.take()["forward"] >= 0  # the seconds per name are still kept as before


def test_busy_share_counts_overlapping_spans_once():
    spans = [Span("a", "x", 0, 4), Span("a", "y", 2, 6), Span("b", "x", 8, 12)]
    assert busy_fractions(spans, 0, 10) == {"a": pytest.approx(0.6), "b": pytest.approx(0.2)}


def test_the_run_timeline_writes_each_steps_spans_and_draws_them(tmp_path):
    engine = ComputeClock()
    with engine("generate"):
        pass

    async def worker_spans():  # a Ray actor's call resolves like this
        return [("forward_backward", 10.0, 11.0)]

    timeline = RunTimeline(
        tmp_path / "timeline.jsonl", [("policy rank 0", worker_spans), ("engine 0", engine.spans.take)]
    )
    timer = PhaseTimer()
    with timer("step"):
        with timer("generate"):  # waiting for rollouts is not trainer work
            pass
        with timer("train_policy"):
            pass
    timeline.add_phases(timer)
    asyncio.run(timeline.collect(step=1))
    rows = [json.loads(line) for line in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    assert {(row["lane"], row["name"], row["step"]) for row in rows} == {
        ("trainer", "train_policy", 1),
        ("policy rank 0", "forward_backward", 1),
        ("engine 0", "generate", 1),
    }
    spans = read_timeline(tmp_path / "timeline.jsonl")
    png = plot_timeline(spans, tmp_path / "timeline.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_busy_share_ignores_spans_outside_the_window():
    spans = [Span("a", "x", 2, 4), Span("a", "y", 12, 15), Span("a", "z", -3, -1)]
    assert busy_fractions(spans, 0, 10) == {"a": pytest.approx(0.2)}
