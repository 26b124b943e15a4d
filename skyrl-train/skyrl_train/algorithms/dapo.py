"""DAPO helpers: zero-variance groups, a dynamic-sampling buffer, overlong filtering and soft overlong punishment.

Reference: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch

from skyrl_train.algorithms.groups import GroupIndex, group_ids, group_stats

TRUNCATED_STOP_REASONS = ("length",)
"""Stop reasons that mean the response was cut at the length limit."""


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


class DynamicSamplingExhaustedError(RuntimeError):
    """The dynamic-sampling buffer hit `max_rounds` without collecting `target_num_groups` informative groups."""


@dataclass(frozen=True)
class SampledGroups:
    """What `DynamicSamplingBuffer.pop` returns."""

    samples: list[Any]
    """Kept samples, group after group, each group in its original sample order. Groups come round by round; within
    a round in group-id order (first appearance for hashable ids, ascending for tensor ids)."""
    group_sizes: list[int]
    """Number of samples of each kept group, in the same order."""
    rounds: int
    """Sampling rounds it took."""
    complete: bool
    """False when the buffer gave up at max_rounds with fewer than target_num_groups groups."""


class DynamicSamplingBuffer:
    """Accumulates informative groups (reward variance > tol) across sampling rounds until there are enough.

    Each `add` is one sampling round: its zero-variance groups are dropped, the rest are kept (see
    `SampledGroups.samples` for the order).
    When `target_num_groups` groups are kept, `add` returns True and `pop` hands out exactly that many (surplus
    groups of the last round are dropped, as in DAPO). If `max_rounds` rounds pass without reaching the target,
    `add` raises `DynamicSamplingExhaustedError`, or, with `return_partial=True`, returns True and `pop` hands out
    what was collected. Group ids only need to be unique within one round.
    """

    def __init__(self, target_num_groups: int, max_rounds: int, return_partial: bool = False, tol: float = 1e-6):
        if target_num_groups <= 0:
            raise ValueError(f"target_num_groups must be > 0, got {target_num_groups}")
        if max_rounds <= 0:
            raise ValueError(f"max_rounds must be > 0, got {max_rounds}")
        self.target_num_groups = target_num_groups
        self.max_rounds = max_rounds
        self.return_partial = return_partial
        self.tol = tol
        self._groups: list[list[Any]] = []
        self._rounds = 0

    @property
    def rounds(self) -> int:
        """Sampling rounds added since the last `pop`."""
        return self._rounds

    @property
    def num_groups(self) -> int:
        """Informative groups kept so far."""
        return len(self._groups)

    @property
    def is_full(self) -> bool:
        """True once `target_num_groups` groups are kept."""
        return self.num_groups >= self.target_num_groups

    @property
    def ready(self) -> bool:
        """True when `pop` may be called: full, or out of rounds with `return_partial`."""
        return self.is_full or (self.return_partial and self._rounds >= self.max_rounds)

    def add(self, samples: Sequence[Any], rewards: Union[torch.Tensor, Sequence[float]], index: GroupIndex) -> bool:
        """Add one sampling round (`samples`, their scalar `rewards` and group `index`); returns `ready`."""
        if self.ready:
            raise RuntimeError("DynamicSamplingBuffer is ready; call pop() before adding another round")
        if len(samples) != len(rewards):
            raise ValueError(f"samples has {len(samples)} entries but rewards has {len(rewards)}")
        self._rounds += 1
        drop = zero_variance_group_mask(rewards, index, self.tol)
        gids, _ = group_ids(index, len(samples))
        kept = (~drop).nonzero().squeeze(-1)
        order = kept[torch.argsort(gids[kept], stable=True)]
        _, sizes = torch.unique_consecutive(gids[order], return_counts=True)
        picked = iter([samples[i] for i in order.tolist()])
        self._groups.extend([next(picked) for _ in range(size)] for size in sizes.tolist())
        if not self.ready and self._rounds >= self.max_rounds:
            raise DynamicSamplingExhaustedError(
                f"dynamic sampling kept {self.num_groups} of target_num_groups={self.target_num_groups} informative "
                f"groups after max_rounds={self.max_rounds} rounds; raise max_rounds, lower the batch size, or "
                "pass return_partial=True to train on what was collected"
            )
        return self.ready

    def pop(self) -> SampledGroups:
        """Hand out the kept groups (at most target_num_groups) and reset the buffer."""
        if not self.ready:
            raise RuntimeError(
                f"DynamicSamplingBuffer is not ready: {self.num_groups}/{self.target_num_groups} groups after "
                f"{self._rounds} rounds"
            )
        groups = self._groups[: self.target_num_groups]
        result = SampledGroups(
            samples=[sample for group in groups for sample in group],
            group_sizes=[len(group) for group in groups],
            rounds=self._rounds,
            complete=len(groups) >= self.target_num_groups,
        )
        self._groups, self._rounds = [], 0
        return result


def truncated_mask(
    batch_size: int,
    stop_reasons: Optional[Sequence[str]] = None,
    response_lengths: Optional[Union[torch.Tensor, Sequence[int]]] = None,
    max_response_len: Optional[int] = None,
) -> torch.Tensor:
    """Bool [B]: responses cut at the length limit (stop reason in TRUNCATED_STOP_REASONS, or length >= max)."""
    if stop_reasons is None and response_lengths is None:
        raise ValueError("pass stop_reasons or response_lengths (with max_response_len) to find truncated responses")
    truncated = torch.zeros(batch_size, dtype=torch.bool)
    if stop_reasons is not None:
        if len(stop_reasons) != batch_size:
            raise ValueError(f"stop_reasons has {len(stop_reasons)} entries, expected {batch_size}")
        truncated |= torch.tensor([reason in TRUNCATED_STOP_REASONS for reason in stop_reasons], dtype=torch.bool)
    if response_lengths is not None:
        if max_response_len is None:
            raise ValueError("response_lengths needs max_response_len to decide which responses were truncated")
        lengths = torch.as_tensor(response_lengths).cpu()
        if lengths.shape != (batch_size,):
            raise ValueError(f"response_lengths must have shape ({batch_size},), got {tuple(lengths.shape)}")
        truncated |= lengths >= max_response_len
    return truncated


def overlong_filter(
    loss_mask: torch.Tensor,
    stop_reasons: Optional[Sequence[str]] = None,
    response_lengths: Optional[Union[torch.Tensor, Sequence[int]]] = None,
    max_response_len: Optional[int] = None,
) -> torch.Tensor:
    """Overlong filtering: a copy of `loss_mask` [B, T] with the rows of truncated responses set to 0."""
    truncated = truncated_mask(loss_mask.shape[0], stop_reasons, response_lengths, max_response_len)
    return loss_mask * (~truncated).to(device=loss_mask.device, dtype=loss_mask.dtype)[:, None]


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
