"""Draw a run's learning curves (training reward, eval accuracy) into one PNG with matplotlib's Agg renderer.

matplotlib is a core dependency but is imported on the first call, so importing the trainer stays fast. The figure
is built with `matplotlib.figure.Figure` directly (no pyplot), so the caller's global matplotlib backend is untouched.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence

DEFAULT_REWARD_KEYS = ("reward/mean",)
"""Training-reward metrics drawn in the left panel (glob patterns)."""

DEFAULT_EVAL_KEYS = ("eval/*/pass_at_1",)
"""Eval-accuracy metrics drawn in the right panel (glob patterns): one line per data source."""


def _matching(history: Mapping[str, Sequence[tuple[int, float]]], patterns: Sequence[str]) -> list[str]:
    names: list[str] = []
    for pattern in patterns:
        names.extend(name for name in sorted(fnmatch.filter(history, pattern)) if name not in names)
    return names


def plot_curves(
    history: Mapping[str, Sequence[tuple[int, float]]],
    path: str,
    title: str = "Training curves",
    reward_keys: Sequence[str] = DEFAULT_REWARD_KEYS,
    eval_keys: Sequence[str] = DEFAULT_EVAL_KEYS,
) -> str:
    """Write a PNG with two panels, training reward and eval accuracy, against the global step; returns `path`.

    `history` maps metric names to `(step, value)` pairs (e.g. `Tracker.history`). A panel with no matching metric
    says so instead of staying blank. Parent directories of `path` are created.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    reward_axes, eval_axes = figure.subplots(1, 2)
    panels = (
        (reward_axes, _matching(history, reward_keys), "Training reward", "reward"),
        (eval_axes, _matching(history, eval_keys), "Eval accuracy", "accuracy (pass@1)"),
    )
    for axes, names, panel_title, y_label in panels:
        axes.set_title(panel_title)
        axes.set_xlabel("global step")
        axes.set_ylabel(y_label)
        axes.grid(True, alpha=0.3)
        for name in names:
            points = sorted(history[name])
            steps = [step for step, _ in points]
            values = [value for _, value in points]
            axes.plot(steps, values, marker="o" if len(points) <= 30 else None, markersize=3, label=name)
        if names:
            axes.legend(loc="best", fontsize="small")
        else:
            wanted = ", ".join(reward_keys if axes is reward_axes else eval_keys)
            axes.text(0.5, 0.5, f"no data for {wanted}", ha="center", va="center", transform=axes.transAxes)
    figure.suptitle(title)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    figure.savefig(path, format="png")
    return path
