"""Reduction denominators, micro-batch loss weights (exact accumulation) and metric aggregation, by hand."""

import pytest
import torch

from skyrl_train.algorithms.reductions import reduce_loss
from skyrl_train.workers.accounting import (
    MetricAccumulator,
    combine_rank_metrics,
    largest,
    micro_batch_weight,
    reduction_denominator,
    smallest,
    total,
    weighted_mean,
)

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    "reduction, expected",
    [
        ("token_mean", 3.0),  # three valid tokens
        ("sequence_mean", 2.0),  # two rows with a valid token
        ("seq_mean_token_sum_norm", 3.0),  # all three rows
        ("token_sum", 1.0),  # a plain sum divides by nothing
    ],
)
def test_reduction_denominator_of_each_builtin(reduction, expected):
    assert reduction_denominator(reduction, MASK, max_seq_len=4) == pytest.approx(expected)


def test_empty_mask_has_zero_denominator_and_weight():
    assert reduction_denominator("token_mean", torch.zeros(2, 3)) == 0.0
    assert micro_batch_weight("token_mean", torch.zeros(1, 3), mini_denominator=3.0) == 0.0
    assert micro_batch_weight("token_mean", MASK, mini_denominator=0.0) == 0.0


@pytest.mark.parametrize(
    "reduction, mini_loss",
    [
        ("token_mean", 2.0),  # (1 + 2 + 3) / 3
        ("sequence_mean", 2.25),  # ((1 + 2) / 2 + 3) / 2
        ("seq_mean_token_sum_norm", 0.5),  # ((1 + 2) / 4 + 3 / 4) / 3
        ("token_sum", 6.0),
    ],
)
def test_weighted_micro_losses_sum_to_the_mini_batch_loss(reduction, mini_loss):
    values = torch.tensor([[1.0, 2.0, 99.0], [3.0, 99.0, 99.0], [99.0, 99.0, 99.0]])
    denominator = reduction_denominator(reduction, MASK, max_seq_len=4)
    total = 0.0
    for rows in ([0], [1, 2]):
        micro_loss = reduce_loss(reduction, values[rows], MASK[rows], max_seq_len=4)
        total += float(micro_loss) * micro_batch_weight(reduction, MASK[rows], denominator, max_seq_len=4)
    assert total == pytest.approx(mini_loss)
    assert float(reduce_loss(reduction, values, MASK, max_seq_len=4)) == pytest.approx(mini_loss)


def test_metric_accumulator_weighted_mean_and_extremes():
    accumulator = MetricAccumulator()
    accumulator.add({"a": 1.0, "ratio_min": 0.5, "ratio_max": 2.0}, weight=1.0)
    accumulator.add({"a": torch.tensor(4.0), "ratio_min": 0.2, "ratio_max": 1.5}, weight=2.0)
    # a: (1 * 1 + 4 * 2) / 3 = 3
    assert accumulator.result() == pytest.approx({"a": 3.0, "ratio_min": 0.2, "ratio_max": 2.0})


def test_combine_rank_metrics_means_and_extremes_and_missing_keys():
    combined = combine_rank_metrics([{"a": 1.0, "x_max": 3.0}, {"a": 3.0, "x_max": 5.0, "b": 2.0}])
    assert combined == pytest.approx({"a": 2.0, "x_max": 5.0, "b": 2.0})


def test_combine_rank_metrics_weights_each_rank_and_takes_other_rules():
    # rank 1 averaged 1 token with mean 2.0, rank 2 three tokens with mean 4.0: the whole mean is (2 + 12) / 4
    per_rank = [{"loss:sum": 1.0, "m:mean": 2.0, "r:min": 0.5}, {"loss:sum": 2.0, "m:mean": 4.0, "r:min": 0.3}]
    assert combine_rank_metrics(per_rank, weights=[1, 3]) == pytest.approx(
        {"loss:sum": 1.75, "m:mean": 3.5, "r:min": 0.35}  # the default rules: every name a weighted mean
    )
    rules = {":sum": total, ":mean": weighted_mean, ":min": smallest, ":max": largest}
    assert combine_rank_metrics(per_rank, weights=[1, 3], rules=rules, default=None) == pytest.approx(
        {"loss:sum": 3.0, "m:mean": 3.5, "r:min": 0.3}
    )
    assert combine_rank_metrics([{"a": 1.0}, {"a": 5.0}], weights=[0, 0]) == {"a": 3.0}  # no weight: the plain mean
    with pytest.raises(ValueError, match=r"metric 'x:median': no rule to combine it \(its name must end in one of"):
        combine_rank_metrics([{"x:median": 1.0}], rules=rules, default=None)
    with pytest.raises(ValueError, match="weights: 1 for 2 ranks' metrics"):
        combine_rank_metrics(per_rank, weights=[1])
