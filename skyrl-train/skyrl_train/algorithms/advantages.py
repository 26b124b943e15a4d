"""Advantage estimators (gae, grpo, rloo, maxrl, reinforce++, reinforce++_baseline, remax, no_op), registered by name.

Every estimator is called with keyword arguments only and returns `(advantages, returns)`, both [B, T] and zero on
tokens where `response_mask` is 0:

    estimator(
        token_level_rewards: Tensor[B, T],   # reward per token; a scalar outcome reward sits on the last valid token
                                             # (see rewards.scalar_rewards_to_token_level)
        response_mask: Tensor[B, T],         # 1 on valid response tokens (use the full response mask, not a loss
                                             # mask that filtering has zeroed, or the group statistics lose samples)
        index: GroupIndex | None = None,     # group id per sample (LongTensor [B] or B hashables); grpo/rloo/baseline
        values: Tensor[B, T] | None = None,  # critic values; gae only
        gamma: float = 1.0,                  # discount per valid token
        lambd: float = 1.0,                  # GAE lambda; gae only
        **estimator_specific_kwargs,         # e.g. norm_by_std (grpo), whiten (gae), baseline_rewards (remax)
    ) -> tuple[Tensor, Tensor]

Each built-in takes `**_unused` so a trainer can pass one uniform set of keyword arguments to whichever estimator the
config names. Estimators run under `torch.no_grad()`: advantages are targets, not part of the graph. Register your own
with `@register_advantage_estimator("name")` and select it with `trainer.algorithm.advantage_estimator`.

Outcome score of a sample = the sum of its token rewards over valid tokens. "Whitening" is (x - mean) / sqrt(var +
1e-8) over all valid tokens of the batch, population variance.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

import torch

from skyrl_train.algorithms.groups import GroupIndex, GroupStats, group_ids, group_stats
from skyrl_train.algorithms.masked import masked_whiten, zero_masked
from skyrl_train.algorithms.registry import ADVANTAGE_ESTIMATORS
from skyrl_train.algorithms.rewards import discounted_returns, scalar_rewards_to_token_level, sequence_scores


class AdvantageEstimator(Protocol):
    """The call signature every registered advantage estimator implements (see the module docstring)."""

    def __call__(
        self,
        *,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Optional[GroupIndex] = None,
        values: Optional[torch.Tensor] = None,
        gamma: float = 1.0,
        lambd: float = 1.0,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


def compute_advantages(estimator: str, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Look up `estimator` in the registry and call it with `kwargs`; returns (advantages, returns)."""
    return ADVANTAGE_ESTIMATORS.get(estimator)(**kwargs)


def _check_rewards(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> None:
    if token_level_rewards.dim() != 2 or token_level_rewards.shape != response_mask.shape:
        raise ValueError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must both be [batch, response_len]"
        )


def _require(value: Any, argument: str, estimator: str, meaning: str) -> Any:
    if value is None:
        raise ValueError(f"advantage estimator '{estimator}' needs `{argument}` ({meaning}); it was None")
    return value


def _grouped_scores(
    estimator: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Optional[GroupIndex]
) -> tuple[torch.Tensor, torch.Tensor, GroupStats]:
    """(score per sample [B], group id per sample [B], per-group statistics) after checking the inputs."""
    _check_rewards(token_level_rewards, response_mask)
    index = _require(index, "index", estimator, "group id per sample")
    scores = sequence_scores(token_level_rewards.float(), response_mask)
    gids, num_groups = group_ids(index, scores.shape[0], scores.device)
    return scores, gids, group_stats(scores, gids, num_groups)


def _broadcast(per_sample: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """A [B] score copied to every valid token of its row; 0 on masked-out tokens."""
    return zero_masked(per_sample[:, None].expand(response_mask.shape).to(torch.float32), response_mask)


@ADVANTAGE_ESTIMATORS.register("gae", builtin=True)
@torch.no_grad()
def gae_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    values: Optional[torch.Tensor] = None,
    gamma: float = 1.0,
    lambd: float = 1.0,
    whiten: bool = True,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over valid tokens.

    delta_t = r_t + gamma * V_next - V_t and A_t = delta_t + gamma * lambd * A_next, where "next" is the next valid
    token (masked-out tokens are skipped) and V after the last valid token is 0. returns = A + V (before whitening);
    advantages are whitened over the batch when `whiten` is True.
    """
    _check_rewards(token_level_rewards, response_mask)
    values = _require(values, "values", "gae", "critic values [B, T]")
    if values.shape != response_mask.shape:
        raise ValueError(f"values has shape {tuple(values.shape)}, expected {tuple(response_mask.shape)}")
    rewards = zero_masked(token_level_rewards.float(), response_mask)
    vals = zero_masked(values.float(), response_mask)
    keep = response_mask.bool()
    next_value = torch.zeros(rewards.shape[0], device=rewards.device)
    running = torch.zeros_like(next_value)
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - vals[:, t]
        running = torch.where(keep[:, t], delta + gamma * lambd * running, running)
        next_value = torch.where(keep[:, t], vals[:, t], next_value)
        advantages[:, t] = running
    returns = zero_masked(advantages + vals, response_mask)
    advantages = masked_whiten(advantages, response_mask) if whiten else zero_masked(advantages, response_mask)
    return advantages, returns


@ADVANTAGE_ESTIMATORS.register("grpo", builtin=True)
@torch.no_grad()
def grpo_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Optional[GroupIndex] = None,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative advantage: (score - group mean) / (group sample std + epsilon), on every valid token.

    With `norm_by_std=False` the division is skipped (Dr. GRPO). A group of one sample gets advantage 0.
    returns equal advantages.
    """
    scores, gids, stats = _grouped_scores("grpo", token_level_rewards, response_mask, index)
    centered = scores - stats.mean[gids]  # a singleton is its own mean, so it gets exactly 0
    if norm_by_std:
        centered = centered / (stats.std[gids] + epsilon)
    advantages = _broadcast(centered, response_mask)
    return advantages, advantages.clone()


@ADVANTAGE_ESTIMATORS.register("rloo", builtin=True)
@torch.no_grad()
def rloo_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Optional[GroupIndex] = None,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out: score minus the mean score of the other samples of its group, on every valid token.

    Equals n / (n - 1) * (score - group mean). A group of one sample gets advantage 0. returns equal advantages.
    """
    scores, gids, stats = _grouped_scores("rloo", token_level_rewards, response_mask, index)
    count = stats.count[gids]
    others_mean = (stats.mean[gids] * count - scores) / (count - 1).clamp(min=1.0)
    per_sample = torch.where(count > 1, scores - others_mean, torch.zeros_like(scores))
    advantages = _broadcast(per_sample, response_mask)
    return advantages, advantages.clone()


@ADVANTAGE_ESTIMATORS.register("maxrl", builtin=True)
@torch.no_grad()
def maxrl_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Optional[GroupIndex] = None,
    mean_epsilon: float = 1e-6,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MaxRL (SkyRL's maximum-likelihood RL estimator): (score - group mean) / (group mean + mean_epsilon), on every
    valid token.

    With success rewards in [0, 1] the group mean estimates the prompt's pass rate p, and dividing by it turns GRPO's
    centred reward into an estimate of the gradient of log p instead of p: prompts the policy rarely solves weigh
    more. Scores must be non-negative (a negative mean would flip the sign); a ValueError names the first bad one.
    A group of one sample gets advantage 0, as in grpo and rloo (SkyRL passes its raw reward through). returns
    equal advantages.
    """
    scores, gids, stats = _grouped_scores("maxrl", token_level_rewards, response_mask, index)
    negative = (scores < 0).nonzero()
    if len(negative):
        row = int(negative[0])
        raise ValueError(
            f"advantage estimator 'maxrl' needs non-negative (success) rewards; sample {row} scored "
            f"{float(scores[row])}"
        )
    mean = stats.mean[gids]
    per_sample = torch.where(stats.count[gids] > 1, (scores - mean) / (mean + mean_epsilon), torch.zeros_like(scores))
    advantages = _broadcast(per_sample, response_mask)
    return advantages, advantages.clone()


@ADVANTAGE_ESTIMATORS.register("reinforce++", builtin=True)
@torch.no_grad()
def reinforce_plus_plus_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted return-to-go per token, whitened over the batch; returns = the unwhitened returns."""
    _check_rewards(token_level_rewards, response_mask)
    returns = discounted_returns(token_level_rewards.float(), response_mask, gamma)
    return masked_whiten(returns, response_mask), returns


@ADVANTAGE_ESTIMATORS.register("reinforce++_baseline", builtin=True)
@torch.no_grad()
def reinforce_plus_plus_baseline_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Optional[GroupIndex] = None,
    gamma: float = 1.0,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group baseline: subtract the group-mean score on each last valid token, then as reinforce++.

    The shifted token rewards are r_t - [t is the last valid token] * mean(scores of the group); their discounted
    return-to-go is whitened over the batch. A group of one sample subtracts its own score.
    """
    _, gids, stats = _grouped_scores("reinforce++_baseline", token_level_rewards, response_mask, index)
    shifted = token_level_rewards.float() - scalar_rewards_to_token_level(stats.mean[gids], response_mask)
    returns = discounted_returns(shifted, response_mask, gamma)
    return masked_whiten(returns, response_mask), returns


@ADVANTAGE_ESTIMATORS.register("no_op", builtin=True)
@torch.no_grad()
def no_op_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The token rewards themselves, as advantages and returns (0 on masked tokens): for dense per-token rewards that
    are already advantages, such as on-policy distillation's teacher log-prob gaps."""
    _check_rewards(token_level_rewards, response_mask)
    advantages = zero_masked(token_level_rewards.float(), response_mask)
    return advantages, advantages.clone()


@ADVANTAGE_ESTIMATORS.register("remax", builtin=True)
@torch.no_grad()
def remax_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    baseline_rewards: Optional[torch.Tensor] = None,
    gamma: float = 1.0,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: return-to-go minus the scalar reward of the greedy baseline rollout of the same prompt.

    `baseline_rewards` [B] holds, for each sample, the reward its prompt's greedy rollout earned. returns = the
    return-to-go without the baseline.
    """
    _check_rewards(token_level_rewards, response_mask)
    baseline_rewards = _require(baseline_rewards, "baseline_rewards", "remax", "greedy-rollout reward per sample [B]")
    baseline = torch.as_tensor(baseline_rewards, dtype=torch.float32, device=response_mask.device)
    if baseline.shape != (response_mask.shape[0],):
        raise ValueError(f"baseline_rewards must have shape ({response_mask.shape[0]},), got {tuple(baseline.shape)}")
    returns = discounted_returns(token_level_rewards.float(), response_mask, gamma)
    return zero_masked(returns - baseline[:, None], response_mask), returns
