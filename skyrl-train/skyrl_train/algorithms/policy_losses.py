"""Policy losses (regular PPO, dual_clip, gspo, cispo, sapo, importance_sampling, cross_entropy), registered by name.

Every policy loss is called with keyword arguments and returns the reduced scalar loss plus detached metrics:

    loss_fn(
        log_probs: Tensor[B, T],                 # current policy log-probs of the sampled tokens (with gradient)
        old_log_probs: Tensor[B, T] | None,      # log-probs of the policy that the advantages refer to (data)
        advantages: Tensor[B, T] | None,         # per-token advantages
        loss_mask: Tensor[B, T],                 # 1 on tokens that count
        config: PolicyLossConfig | Mapping,      # knobs; see policy_loss_config.PolicyLossConfig
        rollout_log_probs: Tensor[B, T] | None,  # log-probs the inference engine reported while sampling
    ) -> tuple[Tensor[], dict[str, Tensor[]]]

The per-token loss (to be minimised) is multiplied by the off-policy weights `config.off_policy` asks for, then
reduced by the registered reduction `config.loss_reduction`. Ratios are r_t = exp(clamp(log_probs - old_log_probs,
-20, 20)). Masked-out positions may hold anything (even NaN/inf): they change neither the loss nor its gradient.

Common metrics: `ratio_mean/min/max` (over valid tokens), `approx_kl` (mean of (r - 1) - log r, the k3 estimate of
KL(old || current)), and for clipped losses `clip_frac`, `clip_frac_low` (A < 0 and r < 1 - eps_clip_low),
`clip_frac_high` (A > 0 and r > 1 + eps_clip_high): fractions of valid tokens where the clipped branch is active.
Register your own loss with `@register_policy_loss("name")` and select it with `trainer.algorithm.policy_loss_type`.
The built-in ratio losses are written as their maths on a prepared `RatioLoss` and given this signature by
`@ratio_policy_loss("name")`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch

from skyrl_train.algorithms.masked import masked_mean, masked_min_max, safe_exp, zero_masked
from skyrl_train.algorithms.off_policy import off_policy_correction
from skyrl_train.algorithms.policy_loss_config import PolicyLossConfig, as_policy_loss_config
from skyrl_train.algorithms.reductions import reduce_loss
from skyrl_train.algorithms.registry import POLICY_LOSSES

ConfigLike = Union[PolicyLossConfig, Mapping[str, Any], None]
Metrics = dict[str, torch.Tensor]
LossAndMetrics = tuple[torch.Tensor, Metrics]


def compute_policy_loss(name: str, **kwargs: Any) -> tuple[torch.Tensor, Metrics]:
    """Look up the policy loss registered as `name` and call it with `kwargs`; returns (loss, metrics)."""
    return POLICY_LOSSES.get(name)(**kwargs)


def require_tensor(tensor: Optional[torch.Tensor], argument: str, loss: str, loss_mask: torch.Tensor) -> torch.Tensor:
    """Return `tensor`, or raise naming `argument` and `loss` when it is None or not shaped like `loss_mask`."""
    if tensor is None:
        raise ValueError(f"policy loss '{loss}' needs `{argument}`; it was None")
    if tensor.shape != loss_mask.shape:
        raise ValueError(
            f"policy loss '{loss}': {argument} has shape {tuple(tensor.shape)}, expected loss_mask's "
            f"{tuple(loss_mask.shape)}"
        )
    return tensor


def log_ratio_and_ratio(
    log_probs: torch.Tensor, anchor_log_probs: torch.Tensor, loss_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log r, r) with log r = log_probs - anchor (anchor detached), 0 on masked-out tokens, r = clamped exp."""
    log_ratio = zero_masked(log_probs.float() - anchor_log_probs.detach().float(), loss_mask)
    return log_ratio, safe_exp(log_ratio)


def ratio_metrics(ratio: torch.Tensor, log_ratio: torch.Tensor, loss_mask: torch.Tensor) -> Metrics:
    """ratio_mean/min/max and approx_kl = mean((r - 1) - log r) over valid tokens."""
    low, high = masked_min_max(ratio.detach(), loss_mask)
    return {
        "ratio_mean": masked_mean(ratio.detach(), loss_mask),
        "ratio_min": low,
        "ratio_max": high,
        "approx_kl": masked_mean((ratio - 1.0 - log_ratio).detach(), loss_mask),
    }


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, loss_mask: torch.Tensor, eps_low: float, eps_high: float
) -> tuple[torch.Tensor, Metrics]:
    """PPO per-token loss max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)) and its clip fractions."""
    per_token = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))
    clipped_high = ((advantages > 0) & (ratio > 1.0 + eps_high)).float()
    clipped_low = ((advantages < 0) & (ratio < 1.0 - eps_low)).float()
    metrics = {
        "clip_frac": masked_mean(clipped_high + clipped_low, loss_mask),
        "clip_frac_low": masked_mean(clipped_low, loss_mask),
        "clip_frac_high": masked_mean(clipped_high, loss_mask),
    }
    return per_token, metrics


def finalize_policy_loss(
    per_token_loss: torch.Tensor,
    *,
    loss_mask: torch.Tensor,
    config: PolicyLossConfig,
    old_log_probs: Optional[torch.Tensor],
    rollout_log_probs: Optional[torch.Tensor],
    metrics: Metrics,
    apply_off_policy: bool = True,
) -> tuple[torch.Tensor, Metrics]:
    """Apply the configured off-policy weights and loss reduction; detach metrics. Shared by all built-in losses.

    Off-policy metrics are added under the prefix "off_policy/".
    """
    per_token_loss = zero_masked(per_token_loss, loss_mask)
    if apply_off_policy and config.off_policy.enabled:
        old = require_tensor(old_log_probs, "old_log_probs", "off-policy correction", loss_mask)
        weights, correction_metrics = off_policy_correction(old, rollout_log_probs, loss_mask, config.off_policy)
        per_token_loss = per_token_loss * weights
        metrics.update({f"off_policy/{key}": value for key, value in correction_metrics.items()})
    loss = reduce_loss(config.loss_reduction, per_token_loss, loss_mask, max_seq_len=config.max_seq_len)
    return loss, {key: value.detach() for key, value in metrics.items()}


@dataclass
class RatioLoss:
    """The setup every ratio-based loss shares (`prepare`) and its last step (`finish`).

    `prepare` checks the anchor log-probs (`old_log_probs`, or `rollout_log_probs` with
    `anchor="rollout_log_probs"`) and the advantages, naming the loss in errors, and takes log r and r against the
    anchor. `finish` adds the ratio metrics and applies `finalize_policy_loss`.
    """

    config: PolicyLossConfig
    loss_mask: torch.Tensor
    log_probs: torch.Tensor
    """The current log-probs as given (with gradient)."""
    advantages: torch.Tensor
    """Detached float32 advantages, 0 on masked-out tokens."""
    log_ratio: torch.Tensor
    ratio: torch.Tensor
    old_log_probs: Optional[torch.Tensor]
    rollout_log_probs: Optional[torch.Tensor]

    @classmethod
    def prepare(
        cls,
        loss: str,
        log_probs: torch.Tensor,
        old_log_probs: Optional[torch.Tensor],
        advantages: Optional[torch.Tensor],
        loss_mask: torch.Tensor,
        config: PolicyLossConfig,
        rollout_log_probs: Optional[torch.Tensor],
        anchor: str = "old_log_probs",
    ) -> RatioLoss:
        """Check the inputs of policy loss `loss` and compute its ratio against `anchor`."""
        anchor_log_probs = old_log_probs if anchor == "old_log_probs" else rollout_log_probs
        anchor_log_probs = require_tensor(anchor_log_probs, anchor, loss, loss_mask)
        adv = zero_masked(require_tensor(advantages, "advantages", loss, loss_mask).detach().float(), loss_mask)
        log_ratio, ratio = log_ratio_and_ratio(log_probs, anchor_log_probs, loss_mask)
        return cls(config, loss_mask, log_probs, adv, log_ratio, ratio, old_log_probs, rollout_log_probs)

    def finish(
        self, per_token_loss: torch.Tensor, metrics: Metrics, ratio_stats: Optional[Metrics] = None
    ) -> tuple[torch.Tensor, Metrics]:
        """Add `ratio_stats` (default: `ratio_metrics` of this ratio) to `metrics`, then `finalize_policy_loss`."""
        metrics.update(
            ratio_metrics(self.ratio, self.log_ratio, self.loss_mask) if ratio_stats is None else ratio_stats
        )
        return finalize_policy_loss(
            per_token_loss,
            loss_mask=self.loss_mask,
            config=self.config,
            old_log_probs=self.old_log_probs,
            rollout_log_probs=self.rollout_log_probs,
            metrics=metrics,
        )


def ratio_policy_loss(
    name: str, anchor: Callable[[PolicyLossConfig], str] = lambda config: "old_log_probs"
) -> Callable[[Callable[[RatioLoss], LossAndMetrics]], Callable[..., LossAndMetrics]]:
    """Register a built-in ratio-based loss, written as its maths on a prepared `RatioLoss`.

    The decorated `body(ctx)` returns `ctx.finish(per_token, metrics)`. What gets registered (and returned) is a
    loss with the keyword signature of the module docstring: it resolves the config, calls `RatioLoss.prepare` with
    the anchor `anchor(config)` names, and hands the result to `body`.
    """

    def decorate(body: Callable[[RatioLoss], LossAndMetrics]) -> Callable[..., LossAndMetrics]:
        def loss_fn(
            *,
            log_probs: torch.Tensor,
            old_log_probs: Optional[torch.Tensor],
            advantages: Optional[torch.Tensor],
            loss_mask: torch.Tensor,
            config: ConfigLike = None,
            rollout_log_probs: Optional[torch.Tensor] = None,
        ) -> LossAndMetrics:
            cfg = as_policy_loss_config(config)
            return body(
                RatioLoss.prepare(
                    name, log_probs, old_log_probs, advantages, loss_mask, cfg, rollout_log_probs, anchor(cfg)
                )
            )

        loss_fn.__name__, loss_fn.__qualname__, loss_fn.__doc__ = body.__name__, body.__qualname__, body.__doc__
        loss_fn.__module__ = body.__module__
        return POLICY_LOSSES.register(name, builtin=True)(loss_fn)

    return decorate


@ratio_policy_loss("regular")
def regular_policy_loss(ctx: RatioLoss) -> LossAndMetrics:
    """Clipped PPO with asymmetric clip-higher: max(-A r, -A clip(r, 1 - eps_clip_low, 1 + eps_clip_high))."""
    cfg = ctx.config
    per_token, metrics = clipped_surrogate(
        ctx.ratio, ctx.advantages, ctx.loss_mask, cfg.eps_clip_low, cfg.eps_clip_high
    )
    return ctx.finish(per_token, metrics)


@ratio_policy_loss("dual_clip")
def dual_clip_policy_loss(ctx: RatioLoss) -> LossAndMetrics:
    """Dual-clip PPO: the regular loss, but for A < 0 capped at -A * clip_ratio_c (bounds huge ratios).

    Metric `dual_clip_frac`: fraction of valid tokens where the cap is active.
    """
    adv, cfg = ctx.advantages, ctx.config
    ppo, metrics = clipped_surrogate(ctx.ratio, adv, ctx.loss_mask, cfg.eps_clip_low, cfg.eps_clip_high)
    cap = -adv * cfg.clip_ratio_c
    per_token = torch.where(adv < 0, torch.minimum(ppo, cap), ppo)
    metrics["dual_clip_frac"] = masked_mean(((adv < 0) & (ppo > cap)).float(), ctx.loss_mask)
    return ctx.finish(per_token, metrics)


@ratio_policy_loss("gspo")
def gspo_policy_loss(ctx: RatioLoss) -> LossAndMetrics:
    """GSPO (token form): sequence ratio s = exp(mean_t log r_t) over valid tokens, clipped PPO on it.

    Per token the ratio is sg(s) * exp(log_probs_t - sg(log_probs_t)): its value is s, its gradient s * grad log p_t,
    which for a sequence-constant advantage equals the gradient of the sequence objective. Clipping uses
    eps_clip_low/high (the GSPO paper uses ranges around 3e-4..4e-4) and the paper reduces with sequence_mean.
    Ratio metrics describe s.
    """
    loss_mask, log_probs, cfg = ctx.loss_mask, ctx.log_probs, ctx.config
    seq_log_ratio = masked_mean(ctx.log_ratio, loss_mask, dim=-1)
    own_grad = zero_masked(log_probs.float() - log_probs.detach().float(), loss_mask)
    token_log_ratio = seq_log_ratio.detach()[:, None] + own_grad
    ratio = safe_exp(token_log_ratio)
    per_token, metrics = clipped_surrogate(ratio, ctx.advantages, loss_mask, cfg.eps_clip_low, cfg.eps_clip_high)
    seq_mask = (loss_mask != 0).any(dim=-1)
    seq_log_ratio = seq_log_ratio.detach()
    return ctx.finish(per_token, metrics, ratio_metrics(safe_exp(seq_log_ratio), seq_log_ratio, seq_mask))


@ratio_policy_loss(
    "cispo", anchor=lambda config: "old_log_probs" if config.cispo_anchor == "old" else "rollout_log_probs"
)
def cispo_policy_loss(ctx: RatioLoss) -> LossAndMetrics:
    """CISPO: -sg(clip(r, 1 - cispo_eps_clip_low, 1 + cispo_eps_clip_high)) * A * log_probs.

    The IS weight is detached, so every token keeps a gradient (-w * A * grad log p); r is taken against
    old_log_probs or, with cispo_anchor="rollout", against rollout_log_probs. `clip_frac` counts valid tokens whose
    weight was clipped.
    """
    low, high = 1.0 - ctx.config.cispo_eps_clip_low, 1.0 + ctx.config.cispo_eps_clip_high
    weight = ctx.ratio.clamp(low, high).detach()
    per_token = -weight * ctx.advantages * zero_masked(ctx.log_probs.float(), ctx.loss_mask)
    return ctx.finish(
        per_token, {"clip_frac": masked_mean(((ctx.ratio < low) | (ctx.ratio > high)).float(), ctx.loss_mask)}
    )


@ratio_policy_loss("sapo")
def sapo_policy_loss(ctx: RatioLoss) -> LossAndMetrics:
    """SAPO, a soft gate in place of the hard clip: -A * sigmoid(tau (r - 1)) * 4 / tau.

    tau = tau_pos where A > 0, else tau_neg. The gate's slope is 1 at r = 1 and decays smoothly away from it.
    Metric `gate_mean`: mean gate over valid tokens.
    """
    adv = ctx.advantages
    tau = torch.where(adv > 0, torch.full_like(adv, ctx.config.tau_pos), torch.full_like(adv, ctx.config.tau_neg))
    gate = torch.sigmoid(tau * (ctx.ratio - 1.0)) * 4.0 / tau
    return ctx.finish(-gate * adv, {"gate_mean": masked_mean(gate.detach(), ctx.loss_mask)})


@ratio_policy_loss("importance_sampling")
def importance_sampling_policy_loss(ctx: RatioLoss) -> LossAndMetrics:
    """Unclipped importance-sampled policy gradient: -r * A (Tinker's `importance_sampling`)."""
    return ctx.finish(-ctx.ratio * ctx.advantages, {})


@POLICY_LOSSES.register("cross_entropy", builtin=True)
def cross_entropy_loss(
    *,
    log_probs: torch.Tensor,
    old_log_probs: Optional[torch.Tensor] = None,
    advantages: Optional[torch.Tensor] = None,
    loss_mask: torch.Tensor,
    config: ConfigLike = None,
    rollout_log_probs: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, Metrics]:
    """Supervised NLL of the given tokens: -log_probs, reduced by `config.loss_reduction` (SFT).

    old_log_probs, advantages and the off-policy settings are ignored. Metric `nll`: mean NLL per valid token.
    """
    cfg = as_policy_loss_config(config)
    if log_probs.shape != loss_mask.shape:
        raise ValueError(f"log_probs has shape {tuple(log_probs.shape)}, expected {tuple(loss_mask.shape)}")
    nll = -zero_masked(log_probs.float(), loss_mask)
    return finalize_policy_loss(
        nll,
        loss_mask=loss_mask,
        config=cfg,
        old_log_probs=None,
        rollout_log_probs=None,
        metrics={"nll": masked_mean(nll.detach(), loss_mask)},
        apply_off_policy=False,
    )
