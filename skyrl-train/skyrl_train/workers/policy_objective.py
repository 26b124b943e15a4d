"""The policy's training objective on one micro-batch: policy loss + KL-to-reference loss + entropy bonus."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Optional

import torch

from skyrl_train.algorithms.entropy import entropy_bonus
from skyrl_train.algorithms.kl import kl_penalty_loss
from skyrl_train.algorithms.masked import masked_mean
from skyrl_train.algorithms.policy_loss_config import PolicyLossConfig
from skyrl_train.algorithms.policy_losses import compute_policy_loss
from skyrl_train.algorithms.registry import KL_ESTIMATORS, POLICY_LOSSES


@dataclass(frozen=True)
class ObjectiveSettings:
    """What the objective adds to the policy loss, from `trainer.algorithm` (or a per-call override)."""

    loss_name: str
    """Registered policy loss."""
    loss_config: PolicyLossConfig
    """Knobs of the policy loss (clip ranges, reduction, off-policy corrections, ...)."""
    kl_loss_coef: Optional[float] = None
    """Coefficient of the KL(policy || ref) loss; None leaves the term out."""
    kl_estimator: str = "k3"
    """Registered KL estimator of that term."""
    entropy_coef: Optional[float] = None
    """Coefficient of the entropy bonus; None leaves the term out."""

    @classmethod
    def from_config(
        cls,
        algorithm: Any,
        loss_name: Optional[str] = None,
        loss_overrides: Optional[Mapping[str, Any]] = None,
        stale_data: bool = False,
    ) -> ObjectiveSettings:
        """Build from `trainer.algorithm`; `loss_name` replaces `policy_loss_type` and `loss_overrides` replace
        fields of `PolicyLossConfig.from_algorithm_config(algorithm, stale_data)` (`stale_data`: the run trains on
        batches sampled by older weights, as the async trainers do)."""
        config = PolicyLossConfig.from_algorithm_config(algorithm, stale_data)
        if loss_overrides:
            config = PolicyLossConfig.from_mapping({**asdict(config), **dict(loss_overrides)})
        loss_name = loss_name or algorithm.policy_loss_type
        POLICY_LOSSES.get(loss_name)  # unknown names fail here, before a worker starts any collective
        if algorithm.use_kl_loss:
            KL_ESTIMATORS.get(algorithm.kl_estimator_type)
        return cls(
            loss_name=loss_name,
            loss_config=config,
            kl_loss_coef=algorithm.kl_loss_coef if algorithm.use_kl_loss else None,
            kl_estimator=algorithm.kl_estimator_type,
            entropy_coef=algorithm.entropy_loss_coef if algorithm.use_entropy_loss else None,
        )


@dataclass
class ObjectiveResult:
    """The loss to backpropagate, its detached parts, and detached metrics (all reduced over the given rows)."""

    total: torch.Tensor
    parts: dict[str, torch.Tensor]
    metrics: dict[str, torch.Tensor]


def policy_objective(
    settings: ObjectiveSettings,
    log_probs: torch.Tensor,
    entropy: torch.Tensor,
    loss_mask: torch.Tensor,
    advantages: Optional[torch.Tensor],
    old_log_probs: Optional[torch.Tensor],
    ref_log_probs: Optional[torch.Tensor] = None,
    rollout_log_probs: Optional[torch.Tensor] = None,
) -> ObjectiveResult:
    """loss = policy_loss + kl_loss_coef * KL(ref) + (-entropy_coef * entropy), each reduced with the policy loss's
    reduction. Parts: `loss` (policy), `kl_loss`, `entropy_loss`; metrics: the policy loss's own (clip fractions,
    ratio, approx KL vs old), `entropy`, `kl_vs_ref`, and `logprob_diff_vs_rollout` when rollout log-probs are given.
    """
    config = settings.loss_config
    policy_loss, metrics = compute_policy_loss(
        settings.loss_name,
        log_probs=log_probs,
        old_log_probs=old_log_probs,
        advantages=advantages,
        loss_mask=loss_mask,
        config=config,
        rollout_log_probs=rollout_log_probs,
    )
    total, parts = policy_loss, {"loss": policy_loss.detach()}
    metrics = dict(metrics)
    if settings.kl_loss_coef is not None:
        if ref_log_probs is None:
            raise ValueError("trainer.algorithm.use_kl_loss is true but forward_backward got ref_logprobs=None")
        kl_loss, kl_mean = kl_penalty_loss(
            log_probs, ref_log_probs, loss_mask, settings.kl_estimator, config.loss_reduction, config.max_seq_len
        )
        total = total + settings.kl_loss_coef * kl_loss
        parts["kl_loss"] = kl_loss.detach()
        metrics["kl_vs_ref"] = kl_mean
    if settings.entropy_coef is not None:
        bonus, _ = entropy_bonus(entropy, loss_mask, settings.entropy_coef, config.loss_reduction, config.max_seq_len)
        total = total + bonus
        parts["entropy_loss"] = bonus.detach()
    metrics["entropy"] = masked_mean(entropy.detach().float(), loss_mask)
    if rollout_log_probs is not None:
        difference = (log_probs.detach().float() - rollout_log_probs.float()).abs()
        metrics["logprob_diff_vs_rollout"] = masked_mean(difference, loss_mask)
    parts["total_loss"] = total.detach()
    return ObjectiveResult(total=total, parts=parts, metrics={k: v.detach() for k, v in metrics.items()})
