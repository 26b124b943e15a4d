"""Truncated IS weights and sequence rejection masks against rollout log-probs, by hand."""

import math

import pytest
import torch

from skyrl_train.algorithms import off_policy

LN = math.log
NAN = float("nan")


def logs(ratios_per_row, width):
    """(old, rollout) log-probs whose valid-token ratios are the given ones; padding holds garbage."""
    old = torch.full((len(ratios_per_row), width), NAN)
    rollout = torch.full((len(ratios_per_row), width), 7.0)
    mask = torch.zeros(len(ratios_per_row), width)
    for row, ratios in enumerate(ratios_per_row):
        for col, ratio in enumerate(ratios):
            old[row, col], rollout[row, col], mask[row, col] = LN(ratio) - 1.0, -1.0, 1.0
    return old, rollout, mask


def test_token_tis_caps_and_detaches():
    old, rollout, mask = logs([[3.0, 0.5], [1.5]], 2)
    weights, metrics = off_policy.token_tis_weights(old.requires_grad_(True), rollout, mask, cap=2.0)
    # ratios [3, 0.5 | 1.5] -> capped at 2: [2, 0.5 | 1.5] ; padding 0
    assert torch.allclose(weights, torch.tensor([[2.0, 0.5], [1.5, 0.0]]), atol=1e-6)
    assert not weights.requires_grad
    assert metrics["tis_token_clip_frac"].item() == pytest.approx(1 / 3)
    assert metrics["tis_token_ratio_mean"].item() == pytest.approx(5 / 3, abs=1e-6)
    assert metrics["tis_token_weight_mean"].item() == pytest.approx(4 / 3, abs=1e-6)


def test_sequence_tis_uses_the_capped_product_ratio():
    old, rollout, mask = logs([[2.0, 2.0], [3.0, 2.0]], 3)
    weights, metrics = off_policy.sequence_tis_weights(old, rollout, mask, cap=5.0)
    # products 4 and 6 -> capped at 5: 4 and 5 on each valid token
    assert torch.allclose(weights, torch.tensor([[4.0, 4.0, 0.0], [5.0, 5.0, 0.0]]), atol=1e-5)
    assert metrics["tis_sequence_ratio_mean"].item() == pytest.approx(5.0, abs=1e-5)
    assert metrics["tis_sequence_clip_frac"].item() == pytest.approx(0.5)
    assert metrics["tis_sequence_weight_mean"].item() == pytest.approx(4.5, abs=1e-5)


def test_geometric_mask_rejects_sequences_outside_the_band():
    old, rollout, mask = logs([[1.005, 1.005], [1.05, 1.0], [0.97]], 2)
    weights, metrics = off_policy.geometric_sequence_mask(old, rollout, mask, low=0.99, high=1.01)
    # geometric means 1.005 (kept), sqrt(1.05) = 1.024695 (rejected), 0.97 (rejected)
    assert torch.equal(weights, torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]))
    assert metrics["geo_mask_frac"].item() == pytest.approx(2 / 3)
    assert metrics["geo_ratio_mean"].item() == pytest.approx((1.005 + math.sqrt(1.05) + 0.97) / 3, abs=1e-5)


def test_product_mask_rejects_sequences_outside_the_band():
    old, rollout, mask = logs([[1.5, 1.2], [1.5, 1.5], [0.4]], 2)
    weights, metrics = off_policy.product_sequence_mask(old, rollout, mask, low=0.5, high=2.0)
    # products 1.8 (kept), 2.25 (rejected), 0.4 (rejected)
    assert torch.equal(weights, torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]))
    assert metrics["product_mask_frac"].item() == pytest.approx(2 / 3)


def test_combined_correction_multiplies_tis_and_mask():
    old, rollout, mask = logs([[3.0, 0.5], [1.5, 1.5]], 2)
    config = off_policy.OffPolicyConfig(tis_ratio_type="token", sequence_mask_metric="product")
    weights, metrics = off_policy.off_policy_correction(old, rollout, mask, config)
    # token TIS [2, 0.5 | 1.5, 1.5] ; products 1.5 (kept) and 2.25 (rejected)
    assert torch.allclose(weights, torch.tensor([[2.0, 0.5], [0.0, 0.0]]), atol=1e-6)
    assert set(metrics) == {
        "mismatch_kl",
        "mismatch_k1",
        "tis_token_ratio_mean",
        "tis_token_clip_frac",
        "tis_token_weight_mean",
        "product_mask_frac",
        "product_ratio_mean",
    }


def test_disabled_correction_is_the_mask_and_enabled_needs_rollout_log_probs():
    old, rollout, mask = logs([[3.0], [1.0]], 2)
    weights, metrics = off_policy.off_policy_correction(old, None, mask, off_policy.OffPolicyConfig())
    assert torch.equal(weights, mask) and metrics == {}
    with pytest.raises(ValueError, match="rollout_log_probs is required"):
        off_policy.off_policy_correction(old, None, mask, off_policy.OffPolicyConfig(sequence_mask_metric="geometric"))
    with pytest.raises(ValueError, match="geo_mask_low"):
        off_policy.OffPolicyConfig(geo_mask_low=1.2)


def test_token_mask_drops_single_tokens_outside_the_band():
    old, rollout, mask = logs([[6.0, 1.0, 0.4], [0.5, 5.0]], 3)
    weights, metrics = off_policy.token_band_mask(old, rollout, mask, low=0.5, high=5.0)
    # ratios 6 and 0.4 leave [0.5, 5]; the band's ends are kept
    assert torch.equal(weights, torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]))
    assert metrics["token_mask_frac"].item() == pytest.approx(2 / 5)


def test_icepop_weight_is_the_ratio_inside_the_band_and_zero_outside():
    old, rollout, mask = logs([[6.0, 1.5, 0.4]], 3)
    config = off_policy.OffPolicyConfig(tis_ratio_type="token", token_tis_ratio_clip_high=5.0, token_mask=True)
    weights, metrics = off_policy.off_policy_correction(old, rollout, mask, config)
    assert torch.allclose(weights, torch.tensor([[0.0, 1.5, 0.0]]), atol=1e-6)
    assert metrics["token_mask_frac"].item() == pytest.approx(2 / 3)
    assert metrics["tis_token_clip_frac"].item() == pytest.approx(1 / 3)  # the 6, capped, then masked anyway
    with pytest.raises(ValueError, match="token_mask_low"):
        off_policy.OffPolicyConfig(token_mask_low=6.0)


def test_mismatch_kl_is_zero_for_equal_policies_and_the_k3_estimate_otherwise():
    old, rollout, mask = logs([[1.0, 1.0], [1.0]], 2)
    metrics = off_policy.mismatch_metrics(old, rollout, mask)
    assert metrics["mismatch_kl"].item() == pytest.approx(0.0, abs=1e-7)
    assert metrics["mismatch_k1"].item() == pytest.approx(0.0, abs=1e-7)
    old, rollout, mask = logs([[2.0, 0.5]], 2)
    metrics = off_policy.mismatch_metrics(old, rollout, mask)
    k3 = [r - 1 - LN(r) for r in (2.0, 0.5)]
    assert metrics["mismatch_kl"].item() == pytest.approx(sum(k3) / 2, abs=1e-6)
    assert metrics["mismatch_k1"].item() == pytest.approx(-(LN(2.0) + LN(0.5)) / 2, abs=1e-6)
