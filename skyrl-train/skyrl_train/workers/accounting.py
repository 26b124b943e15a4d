"""Gradient accumulation bookkeeping: mini-batch loss denominators, micro-batch weights and metric aggregation.

Losses are reduced per micro-batch by the library's reductions, which divide a sum by a count (valid tokens for
`token_mean`, non-empty sequences for `sequence_mean`, rows for `seq_mean_token_sum_norm`, 1 for `token_sum`).
Multiplying a micro-batch loss by `micro count / mini-batch count` turns it into `sum_micro / mini-batch count`,
which is the micro-batch's exact share of the mini-batch loss; summing the weighted backward passes therefore gives
the mini-batch gradient, however the rows are split.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Optional

import torch

from skyrl_train.algorithms.reductions import reduce_loss


def reduction_denominator(reduction: str, mask: torch.Tensor, max_seq_len: Optional[int] = None) -> float:
    """The count the registered loss reduction `reduction` divides by for this `mask`.

    Found by probing the reduction with all-ones values: `reduce(ones, denominator=1) / reduce(ones)` is the default
    denominator of any reduction of the form `sum / count` that honours `denominator` (all built-ins, and user
    reductions that follow the documented signature). Returns 0 when nothing is masked in.
    """
    ones = torch.ones(mask.shape, dtype=torch.float64, device=mask.device)
    default = reduce_loss(reduction, ones, mask, max_seq_len=max_seq_len)
    if float(default) == 0.0:
        return 0.0
    undivided = reduce_loss(reduction, ones, mask, max_seq_len=max_seq_len, denominator=1.0)
    return float(undivided / default)


def micro_batch_weight(
    reduction: str, micro_mask: torch.Tensor, mini_denominator: float, max_seq_len: Optional[int] = None
) -> float:
    """Factor turning a micro-batch's reduced loss into its share of the mini-batch loss (0 for an empty one)."""
    if mini_denominator <= 0:
        return 0.0
    return reduction_denominator(reduction, micro_mask, max_seq_len) / mini_denominator


def _weighted_mean(values: list[tuple[float, float]]) -> float:
    total_weight = sum(weight for _, weight in values)
    if total_weight <= 0:
        return sum(value for value, _ in values) / max(len(values), 1)
    return sum(value * weight for value, weight in values) / total_weight


METRIC_COMBINERS: dict[str, Callable[[list[tuple[float, float]]], float]] = {
    "_min": lambda values: min(value for value, _ in values),
    "_max": lambda values: max(value for value, _ in values),
}
"""How a metric is combined across micro-batches or ranks, by name suffix; any other name is a weighted mean."""


def combine(name: str, values: list[tuple[float, float]]) -> float:
    """Combine `(value, weight)` pairs of metric `name` by the rule its suffix selects."""
    for suffix, combiner in METRIC_COMBINERS.items():
        if name.endswith(suffix):
            return combiner(values)
    return _weighted_mean(values)


def _as_float(value: object) -> float:
    return float(value.item()) if isinstance(value, torch.Tensor) else float(value)


class MetricAccumulator:
    """Collects per-micro-batch metrics and combines them (weighted mean, or `_min` / `_max` by suffix)."""

    def __init__(self) -> None:
        self._values: dict[str, list[tuple[float, float]]] = {}

    def add(self, metrics: Mapping[str, object], weight: float = 1.0) -> None:
        """Record scalar metrics (floats or 0-d tensors) of one micro-batch with its weight."""
        for name, value in metrics.items():
            self._values.setdefault(name, []).append((_as_float(value), float(weight)))

    def result(self) -> dict[str, float]:
        """The combined metrics."""
        return {name: combine(name, values) for name, values in self._values.items()}


def combine_rank_metrics(per_rank: list[Mapping[str, float]]) -> dict[str, float]:
    """Combine metric dicts from data-parallel ranks: mean (equal weights), or min/max by suffix."""
    names: list[str] = []
    for metrics in per_rank:
        names.extend(name for name in metrics if name not in names)
    return {
        name: combine(name, [(_as_float(metrics[name]), 1.0) for metrics in per_rank if name in metrics])
        for name in names
    }
