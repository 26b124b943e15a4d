"""Packed micro-batches on megatron-core's `GPTModel` (`trainer.remove_microbatch_padding` with strategy megatron).

A packed micro-batch (`models.packing.PackedRows`) is one sequence [1, T] holding several rows, each attending only to
its own tokens (and, with `share_prompt_forward`, to the one packed copy of its prompt). megatron-core's own packed
("thd") path needs Transformer Engine's attention and restarts RoPE positions at every segment, which cannot express a
response that attends to a shared prompt. The model built here therefore runs a packed sequence in megatron's usual
[s, b=1] layout, with two modules that change nothing for a padded call:

- the core attention (`packable_core_attention`): for a packed call, each segment's queries attend to their own keys
  through `models.varlen_attention.attend_segments`, the kernel of the fsdp2 workers' packing (flash-attention varlen
  on CUDA in bf16/fp16 with flash-attn installed, SDPA over buckets of similar rows elsewhere); for a padded call,
  megatron's `DotProductAttention` with its mask;
- the rotary embedding (`TokenPositionRotary`): for a packed call, each token is rotated by its own position id
  (megatron rotates token i by position i of the sequence).

Both read the packed call's `packed_seq_params` (`packed_call_params`), which megatron passes to every layer's
attention and to the rotary embedding's length query; it says `qkv_format="sbhd"`, so megatron itself treats the
call as an ordinary one.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

from skyrl_train.models.varlen_attention import VarlenSegments, attend_segments

SEGMENTS = "skyrl_segments"
"""Attribute of a packed call's `PackedSeqParams` holding its `VarlenSegments`."""

POSITIONS = "skyrl_positions"
"""Attribute of a packed call's `PackedSeqParams` holding its tokens' position ids [T]."""


def packed_call_params(segments: VarlenSegments, position_ids: torch.Tensor) -> Any:
    """megatron-core's `PackedSeqParams` for a packed sequence of `segments` whose tokens have `position_ids`
    ([T] or [1, T]): the sbhd layout megatron runs as usual, carrying what the two modules above read."""
    from megatron.core.packed_seq_params import PackedSeqParams

    positions = position_ids.reshape(-1)
    if positions.numel() != segments.num_tokens:
        raise ValueError(
            f"packed call: {positions.numel()} position ids for a packed sequence of {segments.num_tokens} tokens"
        )
    params = PackedSeqParams(qkv_format="sbhd", max_seqlen_q=segments.num_tokens, max_seqlen_kv=segments.num_tokens)
    setattr(params, SEGMENTS, segments)
    setattr(params, POSITIONS, positions)
    return params


def packable_core_attention() -> type:
    """megatron-core's `DotProductAttention` extended to packed calls (see the module docstring)."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    return _packable(DotProductAttention)


@functools.cache
def _packable(base: type) -> type:
    class PackableDotProductAttention(base):  # type: ignore[valid-type, misc]
        """`DotProductAttention` that runs a packed call (its `packed_seq_params` carries segments) as varlen
        attention, and every other call as megatron does."""

        def forward(
            self,
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            attention_mask: Optional[torch.Tensor],
            attn_mask_type: Any = None,
            attention_bias: Optional[torch.Tensor] = None,
            packed_seq_params: Any = None,
        ) -> torch.Tensor:
            """query [s, 1, heads, d], key/value [s, 1, groups, d] -> [s, 1, heads * d] for a packed call."""
            segments = getattr(packed_seq_params, SEGMENTS, None)
            if segments is None:
                return super().forward(
                    query, key, value, attention_mask, attn_mask_type, attention_bias, packed_seq_params
                )
            if query.shape[1] != 1:
                raise ValueError(f"packed attention needs one packed sequence (batch 1), got batch {query.shape[1]}")
            if attention_bias is not None or self.softmax_offset is not None or self.config.window_size is not None:
                raise ValueError(
                    "packed attention on the Megatron model supports plain causal softmax attention only (no "
                    "attention bias, softmax offset or window); set trainer.remove_microbatch_padding=false"
                )
            # megatron scales the scores by softmax_scale and its softmax by the layer number when
            # apply_query_key_layer_scaling is on (softmax_scale is divided by it): the product is the real scale
            scale = self.softmax_scale * (self.layer_number if self.config.apply_query_key_layer_scaling else 1)
            dropout = self.attention_dropout.p if self.training else 0.0
            out = attend_segments(query[:, 0], key[:, 0], value[:, 0], segments, scale=scale, dropout=dropout)
            return out.reshape(out.shape[0], 1, self.hidden_size_per_partition)

    return PackableDotProductAttention


class _TokenPositions:
    """A packed call's position ids, handed from `TokenPositionRotary.get_rotary_seq_len` to its `forward` (megatron
    passes the first's result to the second as the sequence length)."""

    __slots__ = ("positions",)

    def __init__(self, positions: torch.Tensor) -> None:
        self.positions = positions


class TokenPositionRotary(torch.nn.Module):
    """megatron-core's `RotaryEmbedding` (`rotary`, kept inside) returning, for a packed call, one frequency row per
    token at that token's position id: [T, 1, 1, dim] where megatron gives [S, 1, 1, dim] for positions 0..S-1.
    A padded call gets megatron's own result. Holds no state of its own (state dicts are unchanged)."""

    def __init__(self, rotary: torch.nn.Module) -> None:
        super().__init__()
        self.rotary = rotary

    def get_rotary_seq_len(self, *args: Any, **kwargs: Any) -> Any:
        """megatron's length for a padded call; for a packed call, the positions `forward` reads."""
        params = kwargs.get("packed_seq_params", args[4] if len(args) > 4 else None)
        positions = getattr(params, POSITIONS, None)
        if positions is None:
            return self.rotary.get_rotary_seq_len(*args, **kwargs)
        return _TokenPositions(positions)

    def forward(self, length: Any, offset: int = 0, packed_seq: bool = False, cp_group: Any = None) -> torch.Tensor:
        """Frequencies for `length` positions (megatron's), or for each token of a packed call."""
        if not isinstance(length, _TokenPositions):
            return self.rotary(length, offset, packed_seq, cp_group)
        positions = length.positions
        table = self.rotary(int(positions.max()) + 1, offset, False, cp_group)
        return table.index_select(0, positions.to(table.device))


def use_packable_attention(layer_spec: Any) -> None:
    """Give a megatron layer spec (`get_gpt_layer_local_spec`'s) the packable core attention, before building."""
    layer_spec.submodules.self_attention.submodules.core_attention = packable_core_attention()


def use_token_positions(gpt: torch.nn.Module) -> None:
    """Wrap a built `GPTModel`'s rotary embedding in `TokenPositionRotary` (a no-op when already wrapped)."""
    rotary = getattr(gpt, "rotary_pos_emb", None)
    if rotary is not None and not isinstance(rotary, TokenPositionRotary):
        gpt.rotary_pos_emb = TokenPositionRotary(rotary)
