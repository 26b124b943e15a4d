"""The numbers and pictures of `vs_trl.py`: per-run throughput and memory, per-seed ratios, their mean and standard
error, the acceptance check, the printed table and the plot. No TRL, Ray or model is needed here."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

GOAL_RATIO = {"short": 1.8, "long": 1.5}
"""The acceptance bar of each shape: ours / TRL completions per second, with default keys on our side."""


def step_intervals(starts: Sequence[float], ends: Sequence[float]) -> list[float]:
    """Seconds per step: the first step from its start to its end, every later one from the previous step's end
    (so work between steps, such as logging and fetching the next batch, counts)."""
    if not ends or len(starts) < 1:
        return []
    return [ends[0] - starts[0]] + [later - earlier for earlier, later in zip(ends, ends[1:])]


def steady_seconds_per_step(intervals: Sequence[float], warmup_steps: int) -> float:
    """Mean seconds per step after the first `warmup_steps` (all steps when there are no more than that)."""
    if not intervals:
        raise ValueError("no step was timed")
    kept = list(intervals[warmup_steps:]) or list(intervals)
    return statistics.mean(kept)


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over at most `window` values (the first points average what exists so far)."""
    out, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        out.append(total / min(index + 1, window))
    return out


def mean_and_standard_error(values: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error of the mean); the error is 0 for a single value."""
    if not values:
        raise ValueError("no values")
    mean = statistics.mean(values)
    error = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, error


def summarize(run: dict[str, Any], warmup_steps: int, completions_per_step: int) -> dict[str, Any]:
    """Add the steady-state throughput to a run's record: `seconds_per_step`, `completions_per_second`, and
    `generated_tokens_per_second` (tokens of the kept steps over their seconds), plus the phase means."""
    intervals = run["step_seconds"]
    seconds = steady_seconds_per_step(intervals, warmup_steps)
    phases = {name: steady_seconds_per_step(values, warmup_steps) for name, values in run["phase_seconds"].items()}
    tokens = run.get("generated_tokens") or []
    kept = slice(warmup_steps, None) if len(intervals) > warmup_steps else slice(None)
    pairs = list(zip(intervals[kept], tokens[kept]))
    tokens_per_second = sum(t for _, t in pairs) / sum(s for s, _ in pairs) if pairs else None
    return {
        **run,
        "phase_seconds": phases,
        "phase_seconds_per_step": run["phase_seconds"],
        "steps": len(intervals),
        "seconds_per_step": seconds,
        "completions_per_second": completions_per_step / seconds,
        "generated_tokens_per_second": tokens_per_second,
    }


def ratios(ours: dict[str, Any], trl: dict[str, Any]) -> dict[str, Any]:
    """ours / TRL for throughput (above 1: ours is faster), the accuracy difference and the peak memory ratio."""
    tokens = None
    if ours.get("generated_tokens_per_second") and trl.get("generated_tokens_per_second"):
        tokens = ours["generated_tokens_per_second"] / trl["generated_tokens_per_second"]
    memory = proportional = None
    if ours.get("peak_rss_mb", {}).get("total") and trl.get("peak_rss_mb", {}).get("total"):
        memory = ours["peak_rss_mb"]["total"] / trl["peak_rss_mb"]["total"]
    if (ours.get("pss_mb_at_end") or {}).get("total") and (trl.get("pss_mb_at_end") or {}).get("total"):
        proportional = ours["pss_mb_at_end"]["total"] / trl["pss_mb_at_end"]["total"]
    return {
        "completions_per_second": ours["completions_per_second"] / trl["completions_per_second"],
        "generated_tokens_per_second": tokens,
        "seconds_per_step": ours["seconds_per_step"] / trl["seconds_per_step"],
        "accuracy_after_difference": ours["accuracy_after"] - trl["accuracy_after"],
        "peak_rss_total": memory,
        "pss_total_at_end": proportional,
    }


def seed_summary(seeds: list[dict[str, Any]], shape: str) -> dict[str, Any]:
    """Across seeds: mean and standard error of the throughput ratio and of the accuracy difference, each side's
    mean accuracy gain, and whether the shape's acceptance bar is met (ratio at least `GOAL_RATIO[shape]`, and ours's
    accuracy after at least TRL's minus one standard error of the difference)."""
    ratio_mean, ratio_error = mean_and_standard_error([s["ratios"]["completions_per_second"] for s in seeds])
    diff_mean, diff_error = mean_and_standard_error([s["ratios"]["accuracy_after_difference"] for s in seeds])
    gains = {
        side: mean_and_standard_error([s["runs"][side]["accuracy_after"] - s["accuracy_before"] for s in seeds])
        for side in ("trl", "ours")
    }
    goal = GOAL_RATIO[shape]
    return {
        "seeds": len(seeds),
        "completions_per_second_ratio": {"mean": ratio_mean, "standard_error": ratio_error},
        "accuracy_after_difference": {"mean": diff_mean, "standard_error": diff_error},
        "accuracy_gain": {side: {"mean": m, "standard_error": e} for side, (m, e) in gains.items()},
        "goal_ratio": goal,
        "ratio_goal_met": ratio_mean >= goal,
        "accuracy_goal_met": diff_mean >= -diff_error,
    }


def print_seed(seed: dict[str, Any], completions_per_step: int) -> None:
    """One seed's table: each side's steps, s/step, completions/s, tokens/s, peak memory and accuracy."""
    print(f"\nvs_trl seed {seed['seed']}: {completions_per_step} completions per step, same model and settings")
    header = f"{'side':6s} {'steps':>6s} {'s/step':>8s} {'compl/s':>9s} {'tok/s':>9s} {'peak MB':>9s}"
    print(header + f" {'acc before':>11s} {'acc after':>10s}  stack")
    for name, run in seed["runs"].items():
        tokens = run.get("generated_tokens_per_second") or float("nan")
        memory = run.get("peak_rss_mb", {}).get("total", float("nan"))
        print(
            f"{name:6s} {run['steps']:6d} {run['seconds_per_step']:8.3f} {run['completions_per_second']:9.1f} "
            f"{tokens:9.1f} {memory:9.0f} {seed['accuracy_before']:11.3f} {run['accuracy_after']:10.3f}  "
            f"{run['stack']}"
        )
    for name, run in seed["runs"].items():
        print(f"{name} threads: {run['threads']}; peak RSS MB per process: {run.get('peak_rss_mb')}")
        phases = ", ".join(f"{key} {value:.3f}s" for key, value in sorted(run["phase_seconds"].items()))
        print(f"{name} phases (mean per step): {phases}")
    ratio = seed["ratios"]
    print(
        f"ours/TRL: completions/s {ratio['completions_per_second']:.2f}x, s/step {ratio['seconds_per_step']:.2f}x, "
        f"accuracy after {ratio['accuracy_after_difference']:+.3f}"
    )


def print_summary(summary: dict[str, Any]) -> None:
    """The across-seed line and the acceptance verdicts."""
    ratio, diff = summary["completions_per_second_ratio"], summary["accuracy_after_difference"]
    print(
        f"\nover {summary['seeds']} seed(s): ours/TRL completions/s {ratio['mean']:.2f}x +- {ratio['standard_error']:.2f}"
        f" (goal >= {summary['goal_ratio']}x: {'met' if summary['ratio_goal_met'] else 'NOT met'}); accuracy after,"
        f" ours - TRL: {diff['mean']:+.3f} +- {diff['standard_error']:.3f}"
        f" ({'equal or better' if summary['accuracy_goal_met'] else 'WORSE'} within one standard error)"
    )


def plot(seeds: list[dict[str, Any]], path: Path, title: str, window: int = 10) -> None:
    """Left: each seed's mean reward per step, both sides (trailing mean over `window` steps). Right: peak resident
    memory per process of each side (first seed), stacked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, memory) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [2, 1]})
    colours = {"trl": "tab:orange", "ours": "tab:blue"}
    for seed in seeds:
        for name, run in seed["runs"].items():
            steps = range(1, len(run["rewards"]) + 1)
            label = f"{name}" if seed is seeds[0] else None
            curves.plot(steps, moving_average(run["rewards"], window), color=colours[name], alpha=0.8, label=label)
    curves.set_xlabel("training step")
    curves.set_ylabel(f"mean reward ({window}-step trailing mean)")
    curves.set_title(title)
    curves.legend()
    first = seeds[0]["runs"]
    for position, (name, run) in enumerate(first.items()):
        bottom = 0.0
        for process, megabytes in sorted((run.get("peak_rss_mb") or {}).items()):
            if process == "total":
                continue
            memory.bar(position, megabytes, bottom=bottom, color=colours[name], edgecolor="white")
            memory.text(position, bottom + megabytes / 2, process, ha="center", va="center", fontsize=7)
            bottom += megabytes
    memory.set_xticks(range(len(first)), list(first))
    memory.set_ylabel("peak RSS per process, MB (stacked)")
    memory.set_title("memory (seed of the first run)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
