"""KL to the reference policy: per-token estimators (k1, k2, k3, abs), KL as loss or reward penalty, controllers, and
on-policy distillation's rewards (the reference is then a teacher).

With d_t = log_probs_t - ref_log_probs_t on tokens sampled from the current policy (Schulman, "Approximating KL
divergence"), every estimator estimates KL(current || ref):

- k1  = d                      (unbiased, high variance, can be negative)
- k2  = d^2 / 2                (biased, low variance)
- k3  = exp(-d) - 1 + d        (unbiased, low variance, >= 0); -d is clamped to [-20, 20] before exp and the result
                                to [-10, 10], so one far-off token cannot blow up the loss
- abs = |d|

A KL estimator has the signature `estimator(log_probs, ref_log_probs) -> Tensor` (elementwise); register your own
with `@register_kl_estimator("name")`.
"""

from __future__ import annotations

from typing import Optional

import torch

from skyrl_train.algorithms.masked import LOG_RATIO_CLAMP, masked_mean, masked_sum, zero_masked
from skyrl_train.algorithms.reductions import reduce_loss
from skyrl_train.algorithms.registry import KL_ESTIMATORS

K3_CLAMP = 10.0
"""k3 values are clamped to [-10, 10]."""


@KL_ESTIMATORS.register("k1", builtin=True)
def kl_k1(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k1 = log p - log p_ref."""
    return log_probs - ref_log_probs


@KL_ESTIMATORS.register("k2", builtin=True)
def kl_k2(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k2 = (log p - log p_ref)^2 / 2."""
    return 0.5 * (log_probs - ref_log_probs) ** 2


@KL_ESTIMATORS.register("k3", builtin=True)
def kl_k3(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k3 = p_ref/p - 1 - log(p_ref/p), with log(p_ref/p) clamped to [-20, 20] and the result to [-10, 10]."""
    log_ref_over_p = (ref_log_probs - log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (torch.exp(log_ref_over_p) - 1.0 - log_ref_over_p).clamp(-K3_CLAMP, K3_CLAMP)


@KL_ESTIMATORS.register("abs", builtin=True)
def kl_abs(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """abs = |log p - log p_ref|."""
    return (log_probs - ref_log_probs).abs()


def kl_estimate(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    estimator: str = "k3",
    mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Per-token KL estimate [B, T] with the registered `estimator`; 0 on masked-out tokens when `mask` is given."""
    if log_probs.shape != ref_log_probs.shape:
        raise ValueError(
            f"log_probs {tuple(log_probs.shape)} and ref_log_probs {tuple(ref_log_probs.shape)} must have one shape"
        )
    fn = KL_ESTIMATORS.get(estimator)
    if mask is None:
        return fn(log_probs.float(), ref_log_probs.float())
    return zero_masked(fn(zero_masked(log_probs.float(), mask), zero_masked(ref_log_probs.float(), mask)), mask)


def kl_penalty_loss(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    loss_mask: torch.Tensor,
    estimator: str = "k3",
    loss_reduction: str = "token_mean",
    max_seq_len: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KL-as-loss term (before multiplying by kl_loss_coef): (reduced KL, mean per-token KL for logging)."""
    kl = kl_estimate(log_probs, ref_log_probs.detach(), estimator, loss_mask)
    loss = reduce_loss(loss_reduction, kl, loss_mask, max_seq_len=max_seq_len)
    return loss, masked_mean(kl.detach(), loss_mask)


@torch.no_grad()
def kl_in_reward(
    token_level_rewards: torch.Tensor,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
    estimator: str = "k1",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Penalised rewards r_t - kl_coef * KL_t on valid tokens (0 elsewhere), and metrics.

    Metrics: `kl` = mean over sequences of the per-sequence summed KL (what `AdaptiveKLController.update` expects),
    `kl_token_mean` = mean per valid token, `kl_coef`.
    """
    kl = kl_estimate(log_probs, ref_log_probs, estimator, response_mask)
    rewards = zero_masked(token_level_rewards.float(), response_mask) - kl_coef * kl
    per_sequence = masked_sum(kl, response_mask, dim=-1)
    metrics = {
        "kl": per_sequence.mean() if per_sequence.numel() else per_sequence.sum(),
        "kl_token_mean": masked_mean(kl, response_mask),
        "kl_coef": torch.tensor(float(kl_coef)),
    }
    return rewards, metrics


@torch.no_grad()
def distillation_rewards(
    log_probs: torch.Tensor, teacher_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """On-policy distillation's token rewards: log p_teacher - log p_policy on valid tokens (0 elsewhere), the
    negative k1 estimate of KL(policy || teacher) on the policy's own samples; and metrics.

    Metrics: `gap_token_mean` (mean reward per valid token) and `gap_sequence_sum` (mean over sequences of the summed
    rewards); both are minus the reverse KL estimate the training drives towards 0.
    """
    rewards = -kl_estimate(log_probs, teacher_log_probs, "k1", response_mask)
    per_sequence = masked_sum(rewards, response_mask, dim=-1)
    metrics = {
        "gap_token_mean": masked_mean(rewards, response_mask),
        "gap_sequence_sum": per_sequence.mean() if per_sequence.numel() else per_sequence.sum(),
    }
    return rewards, metrics


class FixedKLController:
    """A constant KL coefficient; `update` does nothing."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op (kept so both controllers share one interface)."""


class AdaptiveKLController:
    """Proportional KL controller of Ziegler et al. (2019), used by PPO for RLHF.

    After a batch of `n_steps` samples with observed KL `current_kl`:
    error = clip(current_kl / target - 1, -0.2, 0.2) and value <- value * (1 + error * n_steps / horizon).
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: int) -> None:
        if target <= 0 or horizon <= 0:
            raise ValueError(f"AdaptiveKLController needs target > 0 and horizon > 0, got {target}, {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move the coefficient toward the one that keeps the KL at `target`."""
        error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


KL_CONTROLLER_TYPES = ("fixed", "adaptive")
"""Allowed values of `make_kl_controller`'s `controller_type`."""


def make_kl_controller(
    controller_type: str, kl_coef: float, target: float = 0.1, horizon: int = 10000
) -> FixedKLController | AdaptiveKLController:
    """Build the controller named by `trainer.algorithm.kl_ctrl.type` ("fixed" or "adaptive")."""
    builders = {
        "fixed": lambda: FixedKLController(kl_coef),
        "adaptive": lambda: AdaptiveKLController(kl_coef, target, horizon),
    }
    if controller_type not in builders:
        raise ValueError(f"kl_ctrl.type must be one of {KL_CONTROLLER_TYPES}, got {controller_type!r}")
    return builders[controller_type]()
