"""Tinker's loss semantics (plain sums over tokens) on skyrl_train's losses, checked against the formulas."""

import numpy as np
import pytest
import torch

from skyrl_tx.losses import LossInputError, loss_spec, mean_metric_count, tinker_loss

LOGPROBS = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -4.0, -1.0]])
VALID = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
SAMPLER = torch.tensor([[-1.2, -1.0, -0.5], [-0.3, -4.5, -9.0]])
ADV = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, 100.0]])


def _loss(name, config=None, **inputs):
    _, resolved = loss_spec(name, config or {})
    return tinker_loss(name, resolved, LOGPROBS, inputs, VALID)


def test_cross_entropy_is_the_weighted_sum_of_negative_logprobs():
    weights = torch.tensor([[0.0, 1.0, 0.5], [2.0, 1.0, 7.0]])  # the padded position's weight never counts
    loss, metrics = _loss("cross_entropy", weights=weights)
    expected = -(weights * LOGPROBS * VALID).sum()
    assert float(loss) == pytest.approx(float(expected)) and metrics["loss:sum"] == pytest.approx(float(expected))


def test_importance_sampling_is_minus_the_sum_of_ratio_times_advantage():
    loss, metrics = _loss("importance_sampling", logprobs=SAMPLER, advantages=ADV)
    ratio = torch.exp(LOGPROBS - SAMPLER)
    assert float(loss) == pytest.approx(float(-(ratio * ADV * VALID).sum()), rel=1e-6)
    assert set(metrics) >= {"loss:sum", "ratio_mean:mean", "ratio_max:max", "ratio_min:min"}
    assert all(key.count(":") == 1 for key in metrics)


@pytest.mark.parametrize("low,high", [(0.8, 1.2), (0.5, 1.5)])
def test_ppo_clips_the_ratio_at_the_thresholds(low, high):
    config = None if (low, high) == (0.8, 1.2) else {"clip_low_threshold": low, "clip_high_threshold": high}
    loss, _ = _loss("ppo", config, logprobs=SAMPLER, advantages=ADV)
    ratio = torch.exp(LOGPROBS - SAMPLER)
    per_token = -torch.minimum(ratio * ADV, ratio.clamp(low, high) * ADV)
    assert float(loss) == pytest.approx(float((per_token * VALID).sum()), rel=1e-6)


def test_cispo_weights_logprobs_by_the_detached_clipped_ratio_with_one_sided_defaults():
    logprobs = LOGPROBS.clone().requires_grad_(True)
    _, resolved = loss_spec("cispo", {})
    assert resolved == {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}
    loss, _ = tinker_loss("cispo", resolved, logprobs, {"logprobs": SAMPLER, "advantages": ADV}, VALID)
    weight = torch.exp(LOGPROBS - SAMPLER).clamp(0.0, 4.0)
    assert float(loss.detach()) == pytest.approx(float(-(weight * ADV * LOGPROBS * VALID).sum()), rel=1e-6)
    loss.backward()
    torch.testing.assert_close(logprobs.grad, -(weight * ADV * VALID))  # the weight carries no gradient


def test_unknown_losses_and_config_keys_are_refused_by_name():
    with pytest.raises(LossInputError, match="'dro' is not supported; supported losses"):
        loss_spec("dro", {})
    with pytest.raises(LossInputError, match=r"\['clip_ratio'\] do not apply to loss 'ppo'"):
        loss_spec("ppo", {"clip_ratio": 0.1})


def test_mean_metric_counts_follow_each_losss_mask():
    inputs = {"weights": np.array([0.0, 0.5, 1.0, 0.0])}
    assert mean_metric_count("cross_entropy", inputs, 4) == 2  # nonzero weights, as masked_mean counts them
    assert mean_metric_count("ppo", {}, 4) == 4  # every valid token
