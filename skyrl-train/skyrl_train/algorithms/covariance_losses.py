"""Covariance-targeted policy losses `clip_cov` and `kl_cov` (Cui et al. 2025, "The Entropy Mechanism of RL").

Both score every valid token by its centred covariance term

    cov_t = (log_probs_t - mean(log_probs)) * (A_t - mean(A))

where the means run over all valid tokens of the batch and log_probs are the current (detached) log-probs. Tokens
with large positive covariance are the confident, high-advantage tokens that drive entropy collapse.

Selection is deterministic (the paper samples clip_cov tokens at random; a fixed rule is reproducible and testable):
candidates are sorted by cov_t descending (ties: lower flat index first) and the first k are taken, with
k = max(1, floor(fraction * number of valid tokens)) when fraction > 0, else k = 0.
"""

from __future__ import annotations

import math

import torch

from skyrl_train.algorithms.masked import masked_count, masked_mean, zero_masked
from skyrl_train.algorithms.policy_losses import LossAndMetrics, RatioLoss, clipped_surrogate, ratio_policy_loss


def token_covariance(log_probs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """cov_t = (log p_t - mean log p) * (A_t - mean A), means over valid tokens; 0 on masked-out tokens; detached."""
    logp = zero_masked(log_probs.detach().float(), mask)
    adv = zero_masked(advantages.detach().float(), mask)
    return zero_masked((logp - masked_mean(logp, mask)) * (adv - masked_mean(adv, mask)), mask)


def select_top_tokens(
    scores: torch.Tensor, eligible: torch.Tensor, fraction: float, mask: torch.Tensor
) -> torch.Tensor:
    """Bool [B, T]: the eligible tokens among the k highest `scores`, k = max(1, floor(fraction * n_valid)) or 0."""
    n_valid = int(masked_count(mask).item())
    k = 0 if fraction <= 0 or n_valid == 0 else max(1, math.floor(fraction * n_valid))
    eligible = eligible & mask.bool()
    flat_scores = torch.where(eligible, scores, torch.full_like(scores, -math.inf)).flatten()
    order = torch.argsort(flat_scores, descending=True, stable=True)[:k]
    selected = torch.zeros(flat_scores.shape, dtype=torch.bool, device=scores.device)
    selected[order] = True
    return selected.view_as(scores) & eligible


@ratio_policy_loss("clip_cov")
def clip_cov_policy_loss(ctx: RatioLoss) -> LossAndMetrics:
    """Clip-Cov: regular clipped PPO, with the gradient of a few high-covariance tokens cut off.

    Eligible tokens have clip_cov_lb <= cov_t <= clip_cov_ub; of those, the top k by cov_t (k from clip_cov_ratio,
    see the module docstring) have their per-token loss detached: the loss value is unchanged, their gradient is 0.
    Metric `clip_cov_frac`: detached tokens / valid tokens.
    """
    cfg, loss_mask = ctx.config, ctx.loss_mask
    per_token, metrics = clipped_surrogate(ctx.ratio, ctx.advantages, loss_mask, cfg.eps_clip_low, cfg.eps_clip_high)
    cov = token_covariance(ctx.log_probs, ctx.advantages, loss_mask)
    eligible = (cov >= cfg.clip_cov_lb) & (cov <= cfg.clip_cov_ub)
    selected = select_top_tokens(cov, eligible, cfg.clip_cov_ratio, loss_mask)
    per_token = torch.where(selected, per_token.detach(), per_token)
    metrics["clip_cov_frac"] = masked_mean(selected.float(), loss_mask)
    return ctx.finish(per_token, metrics)


@ratio_policy_loss("kl_cov")
def kl_cov_policy_loss(ctx: RatioLoss) -> LossAndMetrics:
    """KL-Cov: unclipped -A r on every token plus kl_cov_coef * |log r| on the top-covariance tokens.

    The top k valid tokens by cov_t (k from kl_cov_frac, see the module docstring; no bounds) get the penalty.
    Metric `kl_cov_frac`: penalised tokens / valid tokens.
    """
    loss_mask = ctx.loss_mask
    cov = token_covariance(ctx.log_probs, ctx.advantages, loss_mask)
    selected = select_top_tokens(cov, loss_mask.bool(), ctx.config.kl_cov_frac, loss_mask)
    log_ratio = ctx.log_ratio
    penalty = torch.where(selected, ctx.config.kl_cov_coef * log_ratio.abs(), torch.zeros_like(log_ratio))
    per_token = -ctx.advantages * ctx.ratio + penalty
    return ctx.finish(per_token, {"kl_cov_frac": masked_mean(selected.float(), loss_mask)})
