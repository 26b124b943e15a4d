"""The knobs every policy loss reads (`PolicyLossConfig`), and coercion from a plain mapping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Optional, Union

from skyrl_train.algorithms.off_policy import OffPolicyConfig
from skyrl_train.utils.plain_values import dataclass_from_mapping

CISPO_ANCHORS = ("old", "rollout")
"""Allowed values of `PolicyLossConfig.cispo_anchor`."""


ALGORITHM_KEYS: dict[str, str] = {
    "eps_clip_low": "eps_clip_low",
    "eps_clip_high": "eps_clip_high",
    "clip_ratio_c": "clip_ratio_c",
    "loss_reduction": "loss_reduction",
    "max_seq_len": "max_seq_len",
    "tau_pos": "sapo.tau_pos",
    "tau_neg": "sapo.tau_neg",
    "cispo_eps_clip_low": "cispo.eps_clip_low",
    "cispo_eps_clip_high": "cispo.eps_clip_high",
    "cispo_anchor": "cispo.anchor",
    "clip_cov_ratio": "clip_cov.clip_ratio",
    "clip_cov_lb": "clip_cov.clip_cov_lb",
    "clip_cov_ub": "clip_cov.clip_cov_ub",
    "kl_cov_frac": "kl_cov.kl_cov_frac",
    "kl_cov_coef": "kl_cov.kl_cov_coef",
}
"""`PolicyLossConfig` field -> its key under `trainer.algorithm` (`off_policy` aside: `off_policy_correction`)."""


@dataclass(frozen=True)
class PolicyLossConfig:
    """Hyper-parameters of the policy losses; each loss reads only the fields it names in its docstring."""

    eps_clip_low: float = 0.2
    """PPO clip range below 1: the ratio is clipped at 1 - eps_clip_low."""
    eps_clip_high: float = 0.2
    """PPO clip range above 1: the ratio is clipped at 1 + eps_clip_high (DAPO clip-higher uses e.g. 0.28)."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound: for negative advantages the per-token loss is at most -A * clip_ratio_c (must be > 1)."""
    loss_reduction: str = "token_mean"
    """Name of the registered loss reduction (token_mean, sequence_mean, seq_mean_token_sum_norm, token_sum)."""
    max_seq_len: Optional[int] = None
    """Fixed normaliser of seq_mean_token_sum_norm (the maximum response length); required by that reduction."""
    tau_pos: float = 1.0
    """SAPO gate temperature for positive advantages."""
    tau_neg: float = 1.05
    """SAPO gate temperature for negative advantages."""
    cispo_eps_clip_low: float = 1.0
    """CISPO: the IS weight is clipped below at 1 - cispo_eps_clip_low (1.0 = no lower clip)."""
    cispo_eps_clip_high: float = 4.0
    """CISPO: the IS weight is clipped above at 1 + cispo_eps_clip_high."""
    cispo_anchor: str = "old"
    """CISPO ratio denominator: "old" (old_log_probs) or "rollout" (rollout_log_probs)."""
    clip_cov_ratio: float = 2e-4
    """Clip-Cov: fraction of valid tokens whose gradient is detached (at least one when > 0)."""
    clip_cov_lb: float = 1.0
    """Clip-Cov: only tokens with covariance >= clip_cov_lb are eligible."""
    clip_cov_ub: float = 5.0
    """Clip-Cov: only tokens with covariance <= clip_cov_ub are eligible."""
    kl_cov_frac: float = 2e-3
    """KL-Cov: fraction (not percent) of valid tokens, highest covariance first, that get the KL penalty."""
    kl_cov_coef: float = 1.0
    """KL-Cov: coefficient of the |log ratio| penalty on the selected tokens."""
    off_policy: OffPolicyConfig = field(default_factory=OffPolicyConfig)
    """Corrections against rollout_log_probs applied to the per-token loss before the reduction."""

    def __post_init__(self) -> None:
        for name in ("eps_clip_low", "eps_clip_high", "cispo_eps_clip_low", "cispo_eps_clip_high"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 (the dual-clip bound), got {self.clip_ratio_c}")
        if self.tau_pos <= 0 or self.tau_neg <= 0:
            raise ValueError(f"tau_pos and tau_neg must be > 0, got {self.tau_pos}, {self.tau_neg}")
        if self.cispo_anchor not in CISPO_ANCHORS:
            raise ValueError(f"cispo_anchor must be one of {CISPO_ANCHORS}, got {self.cispo_anchor!r}")
        for name in ("clip_cov_ratio", "kl_cov_frac"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a fraction in [0, 1], got {getattr(self, name)}")
        if self.clip_cov_lb > self.clip_cov_ub:
            raise ValueError(f"clip_cov_lb ({self.clip_cov_lb}) must be <= clip_cov_ub ({self.clip_cov_ub})")
        if isinstance(self.off_policy, Mapping):
            object.__setattr__(self, "off_policy", OffPolicyConfig.from_mapping(self.off_policy))

    @classmethod
    def from_algorithm_config(cls, algorithm: Any, stale_data: bool = False) -> PolicyLossConfig:
        """Build from the run config's `trainer.algorithm` section (a `skyrl_train.config.AlgorithmConfig`).

        The section nests per-loss knobs (`cispo.eps_clip_low`, `clip_cov.clip_ratio`, ...); `ALGORITHM_KEYS`
        flattens them onto the loss's field names. Duck-typed so the algorithm library does not import the config
        package.
        `off_policy_correction.tis_ratio_type: auto` becomes `token` when `stale_data` (the async trainers' batches
        were sampled by older weights), else null.
        """
        from dataclasses import asdict

        off_policy = asdict(algorithm.off_policy_correction)
        if off_policy["tis_ratio_type"] == "auto":
            off_policy["tis_ratio_type"] = "token" if stale_data else None
        values = {name: attrgetter(key)(algorithm) for name, key in ALGORITHM_KEYS.items()}
        return cls(**values, off_policy=off_policy)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> PolicyLossConfig:
        """Build from a flat mapping of field names (`off_policy` may be a mapping too); unknown keys are an error."""
        return dataclass_from_mapping(cls, values, "policy loss config")


def as_policy_loss_config(config: Union[PolicyLossConfig, Mapping[str, Any], None]) -> PolicyLossConfig:
    """Accept a `PolicyLossConfig`, a mapping of its fields, or None (all defaults)."""
    if config is None:
        return PolicyLossConfig()
    if isinstance(config, PolicyLossConfig):
        return config
    if isinstance(config, Mapping):
        return PolicyLossConfig.from_mapping(config)
    raise TypeError(f"config must be a PolicyLossConfig or a mapping of its fields, got {type(config).__name__}")
