"""DAPO helpers: zero-variance groups (dynamic sampling's test) and soft overlong punishment.

Reference: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import torch

from skyrl_train.algorithms.groups import GroupIndex, group_ids, group_stats


def zero_variance_group_mask(
    rewards: Union[torch.Tensor, Sequence[float]], index: GroupIndex, tol: float = 1e-6
) -> torch.Tensor:
    """Bool [B]: True for samples whose group's rewards all lie within `tol` of each other (max - min <= tol).

    Such groups (all right or all wrong, and every group of one sample) give GRPO advantages of 0: no signal.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be one scalar per sample ([B]), got shape {tuple(rewards.shape)}")
    gids, num_groups = group_ids(index, rewards.shape[0], rewards.device)
    stats = group_stats(rewards, gids, num_groups)
    return (stats.maximum - stats.minimum <= tol)[gids]


def soft_overlong_punishment(
    response_lengths: Union[torch.Tensor, Sequence[int]],
    max_response_len: int,
    buffer_len: int,
    penalty_factor: float = 1.0,
) -> torch.Tensor:
    """DAPO's length penalty [B] to add to the reward; with L_max = max_response_len, L_cache = buffer_len:

        R(|y|) = 0                                      if |y| <= L_max - L_cache
               = ((L_max - L_cache) - |y|) / L_cache    if L_max - L_cache < |y| <= L_max
               = -1                                     if |y| > L_max

    times `penalty_factor`. The penalty falls linearly from 0 to -1 over the last `buffer_len` tokens.
    """
    if not 0 < buffer_len <= max_response_len:
        raise ValueError(f"buffer_len must be in (0, max_response_len={max_response_len}], got {buffer_len}")
    lengths = torch.as_tensor(response_lengths, dtype=torch.float32)
    expected = float(max_response_len - buffer_len)
    ramp = (expected - lengths) / float(buffer_len)
    penalty = torch.where(lengths <= expected, torch.zeros_like(lengths), ramp)
    penalty = torch.where(lengths > max_response_len, torch.full_like(lengths, -1.0), penalty)
    return penalty * penalty_factor
