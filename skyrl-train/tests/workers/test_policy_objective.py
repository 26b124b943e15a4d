"""The policy objective (policy loss + KL loss + entropy bonus) and its settings, against hand-computed numbers."""

import math

import pytest
import torch

from skyrl_train.config import AlgorithmConfig
from skyrl_train.workers.policy_objective import ObjectiveSettings, policy_objective

LOG_PROBS = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
LOSS_MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
ADVANTAGES = torch.tensor([[2.0, 2.0], [-1.0, -1.0]])
ENTROPY = torch.tensor([[1.0, 2.0], [3.0, 9.0]])


def _settings(**algorithm_fields) -> ObjectiveSettings:
    return ObjectiveSettings.from_config(AlgorithmConfig(**algorithm_fields))


def test_policy_loss_only_with_ratio_one():
    settings = _settings(use_kl_loss=False)
    result = policy_objective(settings, LOG_PROBS, ENTROPY, LOSS_MASK, ADVANTAGES, old_log_probs=LOG_PROBS.clone())
    # ratio 1 everywhere: per-token loss -A = [-2, -2, 1] on the 3 valid tokens; token_mean = -3 / 3 = -1.
    assert float(result.total) == pytest.approx(-1.0)
    assert set(result.parts) == {"loss", "total_loss"}
    assert float(result.metrics["clip_frac"]) == 0.0 and float(result.metrics["approx_kl"]) == 0.0
    assert float(result.metrics["entropy"]) == pytest.approx(2.0)  # (1 + 2 + 3) / 3
    assert "logprob_diff_vs_rollout" not in result.metrics


def test_kl_loss_entropy_bonus_and_rollout_difference():
    settings = _settings(use_kl_loss=True, kl_loss_coef=0.1, use_entropy_loss=True, entropy_loss_coef=0.01)
    ref = LOG_PROBS - math.log(2.0)  # d = log p - log p_ref = ln 2 on every token
    rollout = LOG_PROBS + torch.tensor([[0.1, -0.2], [0.3, 5.0]])
    result = policy_objective(
        settings, LOG_PROBS, ENTROPY, LOSS_MASK, ADVANTAGES, LOG_PROBS.clone(), ref, rollout_log_probs=rollout
    )
    k3 = 0.5 - 1.0 + math.log(2.0)  # exp(-d) - 1 + d = 0.193147
    assert float(result.parts["kl_loss"]) == pytest.approx(k3)
    assert float(result.metrics["kl_vs_ref"]) == pytest.approx(k3)
    assert float(result.parts["entropy_loss"]) == pytest.approx(-0.01 * 2.0)
    assert float(result.total) == pytest.approx(-1.0 + 0.1 * k3 - 0.02)
    assert float(result.parts["total_loss"]) == pytest.approx(float(result.total))
    # |diff| on valid tokens: (0.1 + 0.2 + 0.3) / 3; the masked 5.0 is ignored.
    assert float(result.metrics["logprob_diff_vs_rollout"]) == pytest.approx(0.2)


def test_gradient_of_the_policy_term_by_hand():
    log_probs = LOG_PROBS.clone().requires_grad_(True)
    result = policy_objective(_settings(use_kl_loss=False), log_probs, ENTROPY, LOSS_MASK, ADVANTAGES, LOG_PROBS)
    result.total.backward()
    # d(-A * exp(logp - old)) / dlogp = -A at ratio 1, divided by the 3 valid tokens; 0 where masked.
    assert torch.allclose(log_probs.grad, torch.tensor([[-2 / 3, -2 / 3], [1 / 3, 0.0]]))


def test_kl_loss_needs_reference_logprobs():
    with pytest.raises(ValueError, match="use_kl_loss is true but forward_backward got ref_logprobs=None"):
        policy_objective(_settings(use_kl_loss=True), LOG_PROBS, ENTROPY, LOSS_MASK, ADVANTAGES, LOG_PROBS)


def test_settings_take_config_values_and_per_call_overrides():
    algorithm = AlgorithmConfig(policy_loss_type="dual_clip", eps_clip_high=0.28, kl_estimator_type="k2")
    settings = ObjectiveSettings.from_config(algorithm)
    assert settings.loss_name == "dual_clip" and settings.loss_config.eps_clip_high == 0.28
    assert settings.kl_loss_coef == algorithm.kl_loss_coef and settings.kl_estimator == "k2"
    assert settings.entropy_coef is None
    overridden = ObjectiveSettings.from_config(
        algorithm, "gspo", {"eps_clip_low": 3e-4, "loss_reduction": "sequence_mean"}
    )
    assert overridden.loss_name == "gspo"
    assert (overridden.loss_config.eps_clip_low, overridden.loss_config.loss_reduction) == (3e-4, "sequence_mean")
    assert overridden.loss_config.eps_clip_high == 0.28
    with pytest.raises(ValueError, match="unknown policy loss config keys"):
        ObjectiveSettings.from_config(algorithm, None, {"clip_low": 0.1})
    with pytest.raises(KeyError, match="unknown policy loss 'ppo_typo'"):
        ObjectiveSettings.from_config(algorithm, "ppo_typo")
