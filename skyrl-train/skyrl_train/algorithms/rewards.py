"""Token-level reward tensors: placing a scalar reward on the last valid token, per-sequence sums, returns-to-go.

All tensors are batch-first [batch, response_len]. `response_mask` is 1 on the response tokens that exist (and, in
multi-turn rollouts, that the policy produced); rewards on masked-out tokens are ignored everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import torch

from skyrl_train.algorithms.masked import masked_sum, zero_masked


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last nonzero mask entry of each row (LongTensor [B]); -1 for rows with no such entry."""
    if mask.dim() != 2:
        raise ValueError(f"mask must be [batch, response_len], got shape {tuple(mask.shape)}")
    length = mask.shape[1]
    positions = torch.arange(length, device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), positions, torch.full_like(positions, -1)).max(dim=1).values


def scalar_rewards_to_token_level(
    rewards: Union[torch.Tensor, Sequence[float]], response_mask: torch.Tensor
) -> torch.Tensor:
    """Place one scalar reward per sample on its last valid token: returns `token_level_rewards` [B, T].

    A sample whose mask is all zero has nowhere to hold its reward and gets an all-zero row.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32, device=response_mask.device)
    if rewards.dim() != 1 or rewards.numel() != response_mask.shape[0]:
        raise ValueError(
            f"rewards must be 1-D with one entry per sample ({response_mask.shape[0]}), "
            f"got shape {tuple(rewards.shape)}"
        )
    last = last_token_index(response_mask)
    has_token = last >= 0
    token_rewards = torch.zeros(response_mask.shape, dtype=rewards.dtype, device=response_mask.device)
    rows = torch.arange(response_mask.shape[0], device=response_mask.device)
    token_rewards[rows[has_token], last[has_token]] = rewards[has_token]
    return token_rewards


def sequence_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Outcome score of each sample: the sum of its token rewards over valid tokens ([B])."""
    return masked_sum(token_level_rewards, response_mask, dim=-1)


def discounted_returns(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Return-to-go G_t = r_t + gamma * G_next over valid tokens only; 0 on masked-out tokens.

    Masked-out tokens inside a response (e.g. environment observations between turns) are skipped: they neither
    hold reward nor count as a discounting step. The loop runs over time steps, never over samples; gamma == 1 is a
    reversed cumulative sum.
    """
    rewards = zero_masked(token_level_rewards, response_mask)
    if gamma == 1.0:
        return zero_masked(rewards.flip(-1).cumsum(-1).flip(-1), response_mask)
    keep = response_mask.bool()
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    returns = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        running = torch.where(keep[:, t], rewards[:, t] + gamma * running, running)
        returns[:, t] = running
    return zero_masked(returns, response_mask)
