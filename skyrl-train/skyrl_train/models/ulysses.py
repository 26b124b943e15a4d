"""Ulysses sequence parallelism for packed forwards: one packed sequence split over the ranks of a sequence-parallel
group, each running the model on its own contiguous slice of the tokens.

Everything but attention is per token, so a rank computes its slice alone. For attention, an all-to-all turns
"my tokens, every head" into "every token, my heads" (`heads / size` query heads and their key/value heads per rank);
each rank attends over the whole sequence for its heads with the packed segments (`models.varlen_attention`), and a
second all-to-all turns the output back into "my tokens, every head". Activations per rank shrink with the group's
size, and attention still sees every token, so the log-probs equal the unsplit forward's up to float summation order.

The packed sequence (`models.packing.PackedRows`) is padded at the end to a multiple of the group size: the padding
tokens form a segment of their own, which no row attends to, and nothing is read from them. A rank reads the outputs
at the predicted positions inside its slice; `sharded_response_logprobs` sums those disjoint parts over the group, so
every rank holds the whole [rows, response] result and computes the same loss. In backward each rank keeps its own
part's gradient (the sum's gradient is not reduced again): summed over the group, the ranks' parameter gradients are
the unsplit forward's.

Requirements: the query heads divide by the group size; key/value heads that do not are repeated (each one
`size / gcd(kv_heads, size)` times, which keeps every query head on its own key/value head).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional

from skyrl_train.models.packing import PackedRows, target_logprobs
from skyrl_train.models.varlen_attention import VarlenSegments, attend_segments


class _AllToAll(torch.autograd.Function):
    """All-to-all of equal chunks along dim 0; its backward is the same exchange of the gradients."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Optional[dist.ProcessGroup]) -> torch.Tensor:
        ctx.group = group
        tensor = tensor.contiguous()  # (empty_like would copy a transposed view's strides; the exchange is flat)
        received = torch.empty_like(tensor)
        dist.all_to_all_single(received, tensor, group=group)
        return received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous()
        received = torch.empty_like(grad)
        dist.all_to_all_single(received, grad, group=ctx.group)
        return received, None


class _SumDisjointParts(torch.autograd.Function):
    """Sum over the group of tensors that are zero outside each rank's own part; the gradient passes back as it is
    (every rank computes the same loss from the sum, so each rank's part takes its gradient from its own copy)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Optional[dist.ProcessGroup]) -> torch.Tensor:
        total = tensor.clone()
        dist.all_reduce(total, group=group)
        return total

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def sequence_to_heads(tensor: torch.Tensor, size: int, group: Optional[dist.ProcessGroup]) -> torch.Tensor:
    """[local tokens, heads, dim] on every rank -> [all tokens, heads / size, dim]: rank r keeps head group r of
    every rank's tokens, in rank (= sequence) order."""
    tokens, heads, dim = tensor.shape
    chunks = tensor.reshape(tokens, size, heads // size, dim).transpose(0, 1)  # [size, tokens, heads/size, dim]
    return _AllToAll.apply(chunks, group).reshape(size * tokens, heads // size, dim)


def heads_to_sequence(tensor: torch.Tensor, size: int, group: Optional[dist.ProcessGroup]) -> torch.Tensor:
    """The inverse of `sequence_to_heads`: [all tokens, heads / size, dim] -> [local tokens, heads, dim]."""
    tokens, head_group, dim = tensor.shape
    received = _AllToAll.apply(tensor.reshape(size, tokens // size, head_group, dim), group)
    return received.transpose(0, 1).reshape(tokens // size, size * head_group, dim)


class SequenceShards:
    """One rank's slice of a packed sequence split over a sequence-parallel group: what its packed attention needs.

    Passed to the model as `packed_segments` (a plain class, so FSDP's input casting leaves it alone); the packed
    attention function hands the call to `attend`. `segments` cover the whole padded sequence."""

    __slots__ = ("segments", "group", "size")

    def __init__(self, segments: VarlenSegments, group: Optional[dist.ProcessGroup], size: int) -> None:
        if segments.num_tokens % size:
            raise ValueError(f"sequence parallel: {segments.num_tokens} packed tokens do not split over {size} ranks")
        self.segments, self.group, self.size = segments, group, size

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        scale: Optional[float] = None,
        dropout: float = 0.0,
    ) -> torch.Tensor:
        """Packed attention of this rank's tokens: query [local tokens, H, D], key/value [local tokens, Hkv, D] ->
        [local tokens, H, D], attending over the whole sequence."""
        heads, kv_heads = query.shape[1], key.shape[1]
        if heads % self.size:
            raise ValueError(f"sequence parallel: {heads} attention heads do not split over {self.size} ranks")
        repeat = self.size // math.gcd(kv_heads, self.size)
        if repeat > 1:  # every rank needs whole key/value heads for its query heads
            key, value = key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1)
        query, key, value = (sequence_to_heads(tensor, self.size, self.group) for tensor in (query, key, value))
        output = attend_segments(query, key, value, self.segments, scale=scale, dropout=dropout)
        return heads_to_sequence(output, self.size, self.group)


def pad_segments(segments: VarlenSegments, tokens: int) -> VarlenSegments:
    """`segments` extended to `tokens` packed tokens by one more segment over the padding (its own keys)."""
    extra = tokens - segments.num_tokens
    if extra <= 0:
        return segments
    starts = np.append(segments.query_starts, segments.num_tokens)
    lengths = np.append(segments.query_lengths, extra)
    if segments.key_positions is None:
        return VarlenSegments(starts, lengths)
    keys = np.concatenate([segments.key_positions, np.arange(segments.num_tokens, tokens)])
    return VarlenSegments(starts, lengths, keys, np.append(segments.key_lengths, extra))


@dataclass(eq=False)
class ShardedPacked:
    """One rank's share of a packed forward: the model inputs of its slice and which predicted positions it reads."""

    model_inputs: dict[str, Any]
    """Keyword arguments of the model call on this rank's slice (`packed_segments` is a `SequenceShards`)."""
    local_positions: torch.Tensor
    """Positions within the slice whose outputs predict a response token (the `logits_to_keep` of the call)."""
    targets: torch.Tensor
    """For each of those, its index among the packed rows' targets (`PackedRows.target_ids`)."""


def shard_packed(
    packed: PackedRows, size: int, rank: int, group: Optional[dist.ProcessGroup], pad_token_id: int = 0
) -> ShardedPacked:
    """Rank `rank`'s slice of `packed` split over `size` ranks (padded at the end to a multiple of `size`)."""
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"sequence parallel: rank {rank} of a group of {size}")
    tokens = packed.num_tokens
    local = -(-tokens // size)
    extra = local * size - tokens
    start, end = rank * local, (rank + 1) * local
    input_ids = functional.pad(packed.input_ids, (0, extra), value=pad_token_id)[:, start:end]
    padding_positions = torch.arange(extra, dtype=packed.position_ids.dtype, device=packed.position_ids.device)
    position_ids = torch.cat([packed.position_ids, padding_positions.unsqueeze(0)], dim=1)[:, start:end]
    predict = packed.predict_positions
    targets = ((predict >= start) & (predict < end)).nonzero().squeeze(1)
    shards = SequenceShards(pad_segments(packed.segments, local * size), group, size)
    inputs = {"input_ids": input_ids, "position_ids": position_ids, "packed_segments": shards, "use_cache": False}
    return ShardedPacked(inputs, predict.index_select(0, targets) - start, targets)


def _group_geometry(group: Optional[dist.ProcessGroup]) -> tuple[int, int]:
    return dist.get_world_size(group), dist.get_rank(group)


def _gathered(
    values: torch.Tensor, shard: ShardedPacked, count: int, group: Optional[dist.ProcessGroup]
) -> torch.Tensor:
    """This rank's per-target `values` put in a [count] vector of zeros, summed over the group."""
    mine = values.new_zeros(count).index_put((shard.targets,), values)
    return _SumDisjointParts.apply(mine, group)


def sharded_response_logprobs(
    model: torch.nn.Module,
    packed: PackedRows,
    group: Optional[dist.ProcessGroup],
    temperature: float = 1.0,
    with_entropy: bool = False,
    pad_token_id: int = 0,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """`packing.packed_response_logprobs` over a sequence-parallel group: every rank of `group` calls it with the
    same `packed` rows and gets the whole [rows, response] log-probs (and entropies); the LM head runs only on the
    predicted positions of each rank's slice."""
    size, rank = _group_geometry(group)
    shard = shard_packed(packed, size, rank, group, pad_token_id)
    logits = model(**shard.model_inputs, logits_to_keep=shard.local_positions).logits
    targets = packed.target_ids.index_select(0, shard.targets)
    logprobs, entropy = target_logprobs(logits[0], targets, temperature, with_entropy)
    count = int(packed.target_ids.shape[0])
    if entropy is not None:
        entropy = packed.scatter(_gathered(entropy, shard, count, group))
    return packed.scatter(_gathered(logprobs, shard, count, group)), entropy


def sharded_token_scores(
    model: torch.nn.Module, packed: PackedRows, group: Optional[dist.ProcessGroup], pad_token_id: int = 0
) -> torch.Tensor:
    """`packing.packed_token_scores` (a critic's values) over a sequence-parallel group, [rows, response] on every
    rank."""
    size, rank = _group_geometry(group)
    shard = shard_packed(packed, size, rank, group, pad_token_id)
    scores = model(**shard.model_inputs).logits[0, :, 0].index_select(0, shard.local_positions).float()
    return packed.scatter(_gathered(scores, shard, int(packed.target_ids.shape[0]), group))
