"""Splitting a batch over data-parallel ranks and joining their results (pure functions, no Ray).

Rows are split into equal contiguous shards, rank r taking the r-th (`shard_arguments`). When the row count is not a
multiple of the rank count, copies of the last row are appended; in a `TrainingBatch` they get an all-zero
`loss_mask` (and zero rewards): they change no loss or gradient (but they do count as rows for
`seq_mean_token_sum_norm`). Their results are dropped from the joined output. Any batch with `__len__` and
`select(indices)` can be sharded (e.g. the reward model's `ScoringBatch`). Callers whose losses are sums over tokens
(skyrl-tx) split by size instead, without padding rows: `balanced_ranges`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Protocol, TypeVar

import torch

from skyrl_train.training_batch import TrainingBatch
from skyrl_train.workers.accounting import combine_rank_metrics

PAD_UID_SUFFIX = "#pad"
"""Appended to the uid of padding rows."""


class ShardableBatch(Protocol):
    """A batch `WorkerGroup.run_sharded` can split: a row count and row selection."""

    def __len__(self) -> int: ...

    def select(self, indices: list[int]) -> Any: ...


Batch = TypeVar("Batch", bound=ShardableBatch)


def padded_size(num_rows: int, num_shards: int) -> int:
    """The smallest multiple of `num_shards` that is >= `num_rows`."""
    if num_shards <= 0:
        raise ValueError(f"num_shards must be positive, got {num_shards}")
    return -(-num_rows // num_shards) * num_shards


def pad_batch(batch: Batch, num_shards: int) -> Batch:
    """`batch` plus copies of its last row (loss-masked in a `TrainingBatch`) up to a multiple of `num_shards` rows."""
    if len(batch) == 0:
        raise ValueError("cannot shard an empty batch")
    extra = padded_size(len(batch), num_shards) - len(batch)
    if extra == 0:
        return batch
    padded = batch.select(list(range(len(batch))) + [len(batch) - 1] * extra)
    if not isinstance(padded, TrainingBatch):
        return padded
    padded.loss_mask[len(batch) :] = 0
    padded.token_rewards[len(batch) :] = 0
    padded.uids[len(batch) :] = [uid + PAD_UID_SUFFIX for uid in padded.uids[len(batch) :]]
    return padded


def pad_rows(tensor: torch.Tensor, num_rows: int) -> torch.Tensor:
    """`tensor` with zero rows appended up to `num_rows` rows."""
    extra = num_rows - tensor.shape[0]
    if extra <= 0:
        return tensor
    return torch.cat([tensor, torch.zeros((extra, *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)])


def shard_arguments(batch: Batch, num_shards: int, extras: Mapping[str, Any]) -> list[tuple[Batch, dict[str, Any]]]:
    """Per rank: (its rows of the padded batch, its keyword arguments). Tensor arguments with one row per batch row
    are padded with zeros and split like the batch; every other argument goes to all ranks unchanged."""
    padded = pad_batch(batch, num_shards)
    per_shard = len(padded) // num_shards
    sharded_extras = {}
    for name, value in extras.items():
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == len(batch):
            sharded_extras[name] = pad_rows(value, len(padded)).split(per_shard)
    shards = []
    for rank in range(num_shards):
        rows = list(range(rank * per_shard, (rank + 1) * per_shard))
        kwargs = {
            name: sharded_extras[name][rank] if name in sharded_extras else value for name, value in extras.items()
        }
        shards.append((padded.select(rows), kwargs))
    return shards


def balanced_ranges(sizes: Sequence[int], num_shards: int) -> list[tuple[int, int]]:
    """Split items of `sizes` (e.g. each row's tokens) into at most `num_shards` contiguous, in-order `(start, end)`
    ranges of about equal total size, without padding: for losses that are sums over tokens, where a rank's share of
    the work is its tokens and a padded copy of a row would count twice. Every range holds some size: a range that
    would hold only zero-size items joins its neighbour (no rank gets a shard of empty data). No items: no ranges."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    count = len(sizes)
    total = sum(sizes)
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    cuts = [0]
    for part in range(1, num_shards):
        target = total * part / num_shards
        cut = next(i for i in range(cuts[-1], count + 1) if prefix[i] >= target)
        cuts.append(max(cut, cuts[-1]))
    cuts.append(count)
    ranges: list[tuple[int, int]] = []
    for start, end in zip(cuts, cuts[1:]):
        if end == start:
            continue
        if ranges and (prefix[end] == prefix[start] or prefix[ranges[-1][1]] == prefix[ranges[-1][0]]):
            ranges[-1] = (ranges[-1][0], end)  # an all-empty range joins its neighbour
        else:
            ranges.append((start, end))
    return ranges


def data_parallel_ranks(world_size: int, model_parallel_size: int, inner_size: Optional[int] = None) -> list[int]:
    """The data-parallel rank of each worker rank when `model_parallel_size` ranks hold one model copy: groups of
    `inner_size` consecutive ranks (default all of them), repeated every data-parallel size * `inner_size` ranks.
    Megatron's default rank order (tensor, context, data, pipeline) puts tensor parallelism innermost and pipeline
    stages outermost: a copy's stages are that far apart. Ranks sharing a data-parallel rank get the same shard;
    only the first of each (`representative_ranks`) reports results."""
    inner = model_parallel_size if inner_size is None else inner_size
    if model_parallel_size <= 0 or world_size % model_parallel_size:
        raise ValueError(f"model_parallel_size={model_parallel_size} must be a positive divisor of {world_size} ranks")
    if inner <= 0 or model_parallel_size % inner:
        raise ValueError(f"inner_size={inner} must be a positive divisor of model_parallel_size={model_parallel_size}")
    copies = world_size // model_parallel_size
    return [(rank // inner) % copies for rank in range(world_size)]


def representative_ranks(ranks: list[int]) -> list[int]:
    """The first worker rank of each data-parallel rank, in data-parallel order (`ranks` from `data_parallel_ranks`):
    the ranks whose results stand for their model copy."""
    first: dict[int, int] = {}
    for rank, data_rank in enumerate(ranks):
        first.setdefault(data_rank, rank)
    return [first[data_rank] for data_rank in sorted(first)]


def join_results(results: list[Any], num_rows: int) -> Any:
    """Join per-rank results of a sharded call: tensors are concatenated in rank order with padding rows dropped,
    metric dicts are combined (`combine_rank_metrics`), tuples (named or not) are joined field by field, None stays
    None, anything else is returned as the list."""
    first = results[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(results)[:num_rows]
    if isinstance(first, Mapping):
        return combine_rank_metrics(results)
    if isinstance(first, tuple):
        fields = [join_results([result[position] for result in results], num_rows) for position in range(len(first))]
        return type(first)(*fields) if hasattr(first, "_fields") else tuple(fields)
    if all(result is None for result in results):
        return None
    return results
