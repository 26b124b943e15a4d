"""Gradient accumulation bookkeeping: mini-batch loss denominators, micro-batch weights and metric aggregation.

Losses are reduced per micro-batch by the library's reductions, which divide a sum by a count (valid tokens for
`token_mean`, non-empty sequences for `sequence_mean`, rows for `seq_mean_token_sum_norm`, 1 for `token_sum`).
Multiplying a micro-batch loss by `micro count / mini-batch count` turns it into `sum_micro / mini-batch count`,
which is the micro-batch's exact share of the mini-batch loss; summing the weighted backward passes therefore gives
the mini-batch gradient, however the rows are split.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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


Combiner = Callable[[list[tuple[float, float]]], float]
"""Combines one metric's `(value, weight)` pairs (from micro-batches or ranks) into one value."""


def weighted_mean(values: list[tuple[float, float]]) -> float:
    """The mean weighted by the weights; the plain mean when no value carries weight."""
    total_weight = sum(weight for _, weight in values)
    if total_weight <= 0:
        return sum(value for value, _ in values) / max(len(values), 1)
    return sum(value * weight for value, weight in values) / total_weight


def total(values: list[tuple[float, float]]) -> float:
    """The sum of the values (weights ignored): for metrics that are sums over the parts, such as a summed loss."""
    return float(sum(value for value, _ in values))


def smallest(values: list[tuple[float, float]]) -> float:
    """The smallest value."""
    return min(value for value, _ in values)


def largest(values: list[tuple[float, float]]) -> float:
    """The largest value."""
    return max(value for value, _ in values)


METRIC_COMBINERS: dict[str, Combiner] = {"_min": smallest, "_max": largest}
"""How a metric is combined across micro-batches or ranks, by name suffix; any other name is a weighted mean."""


def combine(
    name: str,
    values: list[tuple[float, float]],
    rules: Optional[Mapping[str, Combiner]] = None,
    default: Optional[Combiner] = weighted_mean,
) -> float:
    """Combine `(value, weight)` pairs of metric `name` by the rule its suffix selects in `rules` (`METRIC_COMBINERS`
    when None), else by `default`; with `default=None` a name no rule matches is refused (ValueError naming it)."""
    for suffix, combiner in (METRIC_COMBINERS if rules is None else rules).items():
        if name.endswith(suffix):
            return combiner(values)
    if default is None:
        known = sorted(METRIC_COMBINERS if rules is None else rules)
        raise ValueError(f"metric {name!r}: no rule to combine it (its name must end in one of {known})")
    return default(values)


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


def combine_rank_metrics(
    per_rank: Sequence[Mapping[str, float]],
    weights: Optional[Sequence[float]] = None,
    rules: Optional[Mapping[str, Combiner]] = None,
    default: Optional[Combiner] = weighted_mean,
) -> dict[str, float]:
    """Combine metric dicts from data-parallel ranks: by default a mean (equal weights), or min/max by suffix.

    `weights` gives each rank's weight in a weighted mean (e.g. the tokens its means averaged over); `rules` and
    `default` replace the suffix rules as in `combine` (skyrl-tx merges its `:sum` / `:mean` / `:min` / `:max` metrics
    so, refusing other names). A name missing from a rank's dict is combined over the ranks that have it.
    """
    if weights is not None and len(weights) != len(per_rank):
        raise ValueError(f"weights: {len(weights)} for {len(per_rank)} ranks' metrics; expected one per rank")
    rank_weights = [1.0] * len(per_rank) if weights is None else [float(weight) for weight in weights]
    names: list[str] = []
    for metrics in per_rank:
        names.extend(name for name in metrics if name not in names)
    return {
        name: combine(
            name,
            [(_as_float(metrics[name]), weight) for metrics, weight in zip(per_rank, rank_weights) if name in metrics],
            rules,
            default,
        )
        for name in names
    }
