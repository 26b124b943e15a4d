"""Off-policy correction against rollout log-probs: truncated importance weights and sequence rejection masks.

The inference engine that sampled a rollout and the trainer that scores it compute slightly different log-probs
(kernels, precision, MoE routing). With rho_t = exp(old_log_probs_t - rollout_log_probs_t) the ratio of the trainer's
(old) policy to the sampler's policy on token t:

- token TIS: weight_t = min(rho_t, cap), detached.
- sequence TIS: weight = min(prod_t rho_t, cap) = min(exp(sum_t log rho_t), cap) on every token of the sequence.
- geometric mask: keep a sequence iff low <= exp(mean_t log rho_t) <= high.
- product mask: keep a sequence iff low <= exp(sum_t log rho_t) <= high.
- token mask (IcePop-style): keep token t iff low <= rho_t <= high; with token TIS capped at `high` on top, the
  weight is rho_t inside the band and 0 outside (IcePop's masked importance weight).

Whenever a correction is on, the metrics also carry the mismatch between the two policies on the sampled tokens:
`mismatch_kl` = mean_t (rho_t - 1 - log rho_t), the k3 estimate of KL(sampler || trainer), and `mismatch_k1` =
mean_t (-log rho_t), its plain (k1) estimate.

Sums and means run over valid tokens; log-ratios are clamped to [-20, 20] before `exp`. Every function returns a
detached [B, T] weight tensor (0 on masked-out tokens) and a dict of detached scalar metrics. A policy loss multiplies
its per-token loss by the weights; the loss reduction still divides by the original mask's count, so a rejected
sequence contributes zero rather than vanishing from the denominator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch

from skyrl_train.algorithms.masked import (
    masked_count,
    masked_mean,
    masked_sum,
    safe_exp,
    zero_masked,
)
from skyrl_train.utils.plain_values import dataclass_from_mapping

TIS_RATIO_TYPES = (None, "token", "sequence")
"""Allowed values of `OffPolicyConfig.tis_ratio_type`."""
SEQUENCE_MASK_METRICS = (None, "geometric", "product")
"""Allowed values of `OffPolicyConfig.sequence_mask_metric`."""


@dataclass(frozen=True)
class OffPolicyConfig:
    """Which off-policy corrections a policy loss applies against `rollout_log_probs` (all off by default)."""

    tis_ratio_type: Optional[str] = None
    """Truncated importance sampling: None (off), "token" or "sequence"."""
    token_tis_ratio_clip_high: float = 2.0
    """Cap of the token-level TIS weight."""
    sequence_tis_ratio_clip_high: float = 5.0
    """Cap of the sequence-level TIS weight."""
    sequence_mask_metric: Optional[str] = None
    """Sequence rejection: None (off), "geometric" (geometric-mean ratio) or "product" (product ratio)."""
    geo_mask_high: float = 1.01
    """Upper bound of the geometric-mean ratio kept."""
    geo_mask_low: float = 0.99
    """Lower bound of the geometric-mean ratio kept."""
    product_mask_high: float = 2.0
    """Upper bound of the product ratio kept."""
    product_mask_low: float = 0.5
    """Lower bound of the product ratio kept."""
    token_mask: bool = False
    """Mask single tokens whose ratio leaves [token_mask_low, token_mask_high] (IcePop-style)."""
    token_mask_low: float = 0.5
    """Lower bound of the token ratio kept."""
    token_mask_high: float = 5.0
    """Upper bound of the token ratio kept."""

    def __post_init__(self) -> None:
        if self.tis_ratio_type not in TIS_RATIO_TYPES:
            raise ValueError(f"off_policy.tis_ratio_type must be one of {TIS_RATIO_TYPES}, got {self.tis_ratio_type!r}")
        if self.sequence_mask_metric not in SEQUENCE_MASK_METRICS:
            raise ValueError(
                f"off_policy.sequence_mask_metric must be one of {SEQUENCE_MASK_METRICS}, "
                f"got {self.sequence_mask_metric!r}"
            )
        bands = (("geo_mask_low", "geo_mask_high"), ("product_mask_low", "product_mask_high"))
        for low, high in (*bands, ("token_mask_low", "token_mask_high")):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"off_policy.{low} ({getattr(self, low)}) must be <= off_policy.{high}")

    @property
    def enabled(self) -> bool:
        """True when any correction is switched on (then `rollout_log_probs` is required)."""
        return self.tis_ratio_type is not None or self.sequence_mask_metric is not None or self.token_mask

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> OffPolicyConfig:
        """Build from a mapping of field names; unknown keys are an error naming them."""
        return dataclass_from_mapping(cls, values, "off_policy")


def _log_ratio(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if old_log_probs.shape != mask.shape or rollout_log_probs.shape != mask.shape:
        raise ValueError(
            f"old_log_probs {tuple(old_log_probs.shape)}, rollout_log_probs {tuple(rollout_log_probs.shape)} and "
            f"mask {tuple(mask.shape)} must share one [batch, response_len] shape"
        )
    return zero_masked(old_log_probs.detach().float() - rollout_log_probs.detach().float(), mask)


def _nonempty(mask: torch.Tensor) -> torch.Tensor:
    return masked_count(mask, dim=-1) > 0


def _sequence_mean(per_sequence: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of a [B] quantity over sequences that have at least one valid token."""
    return masked_mean(per_sequence, _nonempty(mask))


def _tis_metrics(
    level: str, ratio: torch.Tensor, weight: torch.Tensor, cap: float, mean: Callable[[torch.Tensor], torch.Tensor]
) -> dict[str, torch.Tensor]:
    """`tis_<level>_ratio_mean`, `_clip_frac` (ratio > cap) and `_weight_mean`, each averaged with `mean`."""
    return {
        f"tis_{level}_ratio_mean": mean(ratio),
        f"tis_{level}_clip_frac": mean((ratio > cap).float()),
        f"tis_{level}_weight_mean": mean(weight),
    }


def token_tis_weights(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-level truncated IS: weight_t = min(exp(old_t - rollout_t), cap), detached; 0 on masked-out tokens."""
    ratio = safe_exp(_log_ratio(old_log_probs, rollout_log_probs, mask))
    weight = ratio.clamp(max=cap)
    return zero_masked(weight, mask), _tis_metrics("token", ratio, weight, cap, lambda x: masked_mean(x, mask))


def sequence_tis_weights(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Sequence-level truncated IS: min(exp(sum_t (old_t - rollout_t)), cap) on every valid token of the sequence."""
    seq_ratio = safe_exp(masked_sum(_log_ratio(old_log_probs, rollout_log_probs, mask), mask, dim=-1))
    seq_weight = seq_ratio.clamp(max=cap)
    weights = zero_masked(seq_weight[:, None].expand(mask.shape), mask)
    return weights, _tis_metrics("sequence", seq_ratio, seq_weight, cap, lambda x: _sequence_mean(x, mask))


def _band_mask(
    seq_ratio: torch.Tensor, mask: torch.Tensor, low: float, high: float, name: str
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    keep = (seq_ratio >= low) & (seq_ratio <= high)
    weights = zero_masked(keep.float()[:, None].expand(mask.shape), mask)
    metrics = {
        f"{name}_mask_frac": _sequence_mean((~keep).float(), mask),
        f"{name}_ratio_mean": _sequence_mean(seq_ratio, mask),
    }
    return weights, metrics


def geometric_sequence_mask(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, low: float, high: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """1 on the valid tokens of sequences whose geometric-mean ratio exp(mean_t log rho_t) is in [low, high], else 0."""
    mean_log_ratio = masked_mean(_log_ratio(old_log_probs, rollout_log_probs, mask), mask, dim=-1)
    return _band_mask(safe_exp(mean_log_ratio), mask, low, high, "geo")


def product_sequence_mask(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, low: float, high: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """1 on the valid tokens of sequences whose product ratio exp(sum_t log rho_t) is in [low, high], else 0."""
    sum_log_ratio = masked_sum(_log_ratio(old_log_probs, rollout_log_probs, mask), mask, dim=-1)
    return _band_mask(safe_exp(sum_log_ratio), mask, low, high, "product")


def token_band_mask(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, low: float, high: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """1 on valid tokens whose ratio rho_t is in [low, high], else 0 (IcePop's token mask)."""
    ratio = safe_exp(_log_ratio(old_log_probs, rollout_log_probs, mask))
    keep = ((ratio >= low) & (ratio <= high)).float()
    weights = zero_masked(keep, mask)
    return weights, {"token_mask_frac": masked_mean(1.0 - keep, mask)}


def mismatch_metrics(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """How far the trainer's (old) policy is from the sampler's on the sampled tokens: `mismatch_kl` (k3 estimate
    of KL(sampler || trainer), mean of rho - 1 - log rho) and `mismatch_k1` (mean of -log rho)."""
    log_ratio = _log_ratio(old_log_probs, rollout_log_probs, mask)
    ratio = safe_exp(log_ratio)
    return {
        "mismatch_kl": masked_mean(ratio - 1.0 - log_ratio, mask),
        "mismatch_k1": masked_mean(-log_ratio, mask),
    }


_TIS_BY_TYPE = {
    "token": (token_tis_weights, "token_tis_ratio_clip_high"),
    "sequence": (sequence_tis_weights, "sequence_tis_ratio_clip_high"),
}
_SEQUENCE_MASK_BY_METRIC = {
    "geometric": (geometric_sequence_mask, "geo_mask_low", "geo_mask_high"),
    "product": (product_sequence_mask, "product_mask_low", "product_mask_high"),
}


def off_policy_correction(
    old_log_probs: torch.Tensor,
    rollout_log_probs: Optional[torch.Tensor],
    mask: torch.Tensor,
    config: OffPolicyConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Combined per-token weights (TIS weight x sequence keep-mask x token keep-mask) and metrics (with the
    mismatch KL) for the corrections `config` enables.

    Returns weights of 1 on valid tokens when nothing is enabled. `rollout_log_probs` is required otherwise.
    """
    weights = (mask != 0).float()
    metrics: dict[str, torch.Tensor] = {}
    if not config.enabled:
        return weights, metrics
    if rollout_log_probs is None:
        raise ValueError(
            f"rollout_log_probs is required when off_policy.tis_ratio_type={config.tis_ratio_type!r} or "
            f"off_policy.sequence_mask_metric={config.sequence_mask_metric!r} is set; the generator must return "
            "rollout logprobs (sampling_params.logprobs)"
        )
    metrics.update(mismatch_metrics(old_log_probs, rollout_log_probs, mask))
    tis, keep = weights, weights
    if config.tis_ratio_type is not None:
        tis_fn, cap_field = _TIS_BY_TYPE[config.tis_ratio_type]
        tis, tis_metrics = tis_fn(old_log_probs, rollout_log_probs, mask, getattr(config, cap_field))
        metrics.update(tis_metrics)
    if config.sequence_mask_metric is not None:
        mask_fn, low_field, high_field = _SEQUENCE_MASK_BY_METRIC[config.sequence_mask_metric]
        keep, mask_metrics = mask_fn(
            old_log_probs, rollout_log_probs, mask, getattr(config, low_field), getattr(config, high_field)
        )
        metrics.update(mask_metrics)
    if config.token_mask:
        token_keep, token_metrics = token_band_mask(
            old_log_probs, rollout_log_probs, mask, config.token_mask_low, config.token_mask_high
        )
        keep = keep * token_keep
        metrics.update(token_metrics)
    return tis * keep, metrics
