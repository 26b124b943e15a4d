"""Group ids and per-group statistics (count, mean, std, min, max) computed with segment ops, no per-sample loops.

A "group" is the set of samples drawn for the same prompt (GRPO/RLOO). Callers pass group membership as `index`:
either a 1-D integer tensor, or a sequence of hashables (e.g. prompt uids) with one entry per sample.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Union

import torch

GroupIndex = Union[torch.Tensor, Sequence[Hashable]]
"""Group membership of each sample: a 1-D integer tensor or a sequence of hashables, length = batch size."""


def group_ids(index: GroupIndex, batch_size: int, device: torch.device | str | None = None) -> tuple[torch.Tensor, int]:
    """Map `index` to dense group ids 0..G-1; returns (LongTensor [batch_size], G).

    Tensor ids are numbered in sorted order of their values; hashables in order of first appearance.
    """
    if isinstance(index, torch.Tensor):
        if index.dim() != 1 or index.dtype.is_floating_point or index.dtype == torch.bool:
            raise ValueError(f"index must be a 1-D integer tensor, got dtype {index.dtype} shape {tuple(index.shape)}")
        if index.numel() != batch_size:
            raise ValueError(f"index has {index.numel()} entries but the batch has {batch_size} samples")
        uniques, inverse = torch.unique(index, return_inverse=True)
        return inverse.to(device=device or index.device, dtype=torch.long), int(uniques.numel())
    if isinstance(index, str | bytes) or not hasattr(index, "__len__"):
        raise ValueError(f"index must be a 1-D integer tensor or a sequence of hashables, got {type(index).__name__}")
    if len(index) != batch_size:
        raise ValueError(f"index has {len(index)} entries but the batch has {batch_size} samples")
    dense: dict[Hashable, int] = {}
    ids = [dense.setdefault(key, len(dense)) for key in index]
    return torch.tensor(ids, dtype=torch.long, device=device), len(dense)


@dataclass(frozen=True)
class GroupStats:
    """Per-group statistics of one scalar per sample; every field is a tensor of shape [num_groups]."""

    count: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    """Sample standard deviation (n - 1 in the denominator); 0 for groups of one sample."""
    minimum: torch.Tensor
    maximum: torch.Tensor


def group_stats(values: torch.Tensor, gids: torch.Tensor, num_groups: int) -> GroupStats:
    """Count, mean, sample std, min and max of `values` [B] per group, via `index_add`/`scatter_reduce`."""
    if values.dim() != 1 or gids.shape != values.shape:
        raise ValueError(
            f"values and gids must both be 1-D of equal length, got {tuple(values.shape)}, {tuple(gids.shape)}"
        )
    values = values.float()
    zeros = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    count = zeros.index_add(0, gids, torch.ones_like(values))
    mean = zeros.index_add(0, gids, values) / count.clamp(min=1.0)
    sq_dev = zeros.index_add(0, gids, (values - mean[gids]) ** 2)
    std = torch.where(count > 1, (sq_dev / (count - 1).clamp(min=1.0)).sqrt(), zeros)
    minimum = zeros.scatter_reduce(0, gids, values, reduce="amin", include_self=False)
    maximum = zeros.scatter_reduce(0, gids, values, reduce="amax", include_self=False)
    return GroupStats(count=count, mean=mean, std=std, minimum=minimum, maximum=maximum)
