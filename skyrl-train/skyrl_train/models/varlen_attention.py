"""Attention over packed rows: one sequence of several segments, each attending causally to its own keys only.

A packed sequence holds T tokens; segment s owns the queries at packed positions `[cu_q[s], cu_q[s + 1])` and attends
to the keys at `key_positions[cu_k[s]:cu_k[s + 1]]` (by default the same span as its queries). Causality is aligned at
the end, as in flash-attention's varlen kernel: query i of a segment with `lq` queries and `lk` keys sees keys
`0 .. i + lk - lq`. A response segment whose keys are its prompt's span followed by its own span therefore attends to
the shared prompt and to its own earlier tokens, and never to another row.

The model runs this through Hugging Face's attention interface (`PACKED_ATTENTION`, registered on import): a call that
carries `packed_segments` runs the varlen kernel, any other call is plain SDPA with the usual masks. Kernels:
- `flash_attn`: `flash_attn.flash_attn_varlen_func` on CUDA in fp16/bf16 (when the `flash-attn` package is
  installed): the GPU path, one kernel call per layer.
- `sdpa`: every device; segments of similar size are gathered into padded buckets and each bucket is one
  `scaled_dot_product_attention` call with a boolean mask.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any, Optional

import numpy as np
import torch
from torch.nn import functional
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

PACKED_ATTENTION = "skyrl_packed"
"""The attention implementation name a model is switched to for packed forwards (`enable_packed_attention`)."""

BUCKET_SLACK = 1.5
"""A bucket's padded attention area (segments x longest queries x longest keys) may exceed the sum of its segments'
own areas by this factor (plus `BUCKET_FLOOR`) before a new bucket starts."""

BUCKET_FLOOR = 4096
"""Padded area always allowed in a bucket: below this, another SDPA call costs more than computing the padding."""


class VarlenSegments:
    """Which keys each segment of a packed sequence attends to (see the module docstring).

    A plain class (not a dataclass or tuple), so FSDP's input casting passes it to every layer untouched. Device
    tensors and the SDPA buckets are built once per device and shared by all layers (and by a checkpointed layer's
    recomputation)."""

    __slots__ = ("query_starts", "query_lengths", "key_positions", "key_lengths", "_device_cache")

    def __init__(
        self,
        query_starts: np.ndarray,
        query_lengths: np.ndarray,
        key_positions: Optional[np.ndarray] = None,
        key_lengths: Optional[np.ndarray] = None,
    ) -> None:
        self.query_starts = np.asarray(query_starts, dtype=np.int64)
        self.query_lengths = np.asarray(query_lengths, dtype=np.int64)
        if (key_positions is None) != (key_lengths is None):
            raise ValueError("VarlenSegments: give key_positions and key_lengths together, or neither")
        if self.query_lengths.size == 0 or (self.query_lengths <= 0).any():
            raise ValueError(f"VarlenSegments: every segment needs >= 1 query, got lengths {self.query_lengths}")
        expected_starts = np.concatenate([[0], np.cumsum(self.query_lengths)[:-1]])
        if not np.array_equal(self.query_starts, expected_starts):
            raise ValueError("VarlenSegments: segments must cover the packed sequence in order, without gaps")
        self.key_positions = None if key_positions is None else np.asarray(key_positions, dtype=np.int64)
        self.key_lengths = self.query_lengths if key_lengths is None else np.asarray(key_lengths, dtype=np.int64)
        if key_lengths is not None:
            if self.key_lengths.shape != self.query_lengths.shape or (self.key_lengths < self.query_lengths).any():
                raise ValueError("VarlenSegments: each segment needs at least as many keys as queries")
            if self.key_positions.size != int(self.key_lengths.sum()):
                raise ValueError("VarlenSegments: key_positions must hold sum(key_lengths) positions")
        self._device_cache: dict[Any, Any] = {}

    @property
    def num_tokens(self) -> int:
        """T: the packed sequence's length."""
        return int(self.query_lengths.sum())

    @property
    def shares_keys(self) -> bool:
        """True when some segment attends to keys outside its own span (a shared prompt)."""
        return self.key_positions is not None

    def _cached(self, key: Any, build: Any) -> Any:
        if key not in self._device_cache:
            self._device_cache[key] = build()
        return self._device_cache[key]

    def flash_arguments(
        self, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, int, int, Optional[torch.Tensor]]:
        """(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, key gather index or None) for a varlen kernel."""

        def build():
            cu_q = np.concatenate([[0], np.cumsum(self.query_lengths)])
            cu_k = np.concatenate([[0], np.cumsum(self.key_lengths)])
            gather = None if self.key_positions is None else torch.from_numpy(self.key_positions).to(device)
            return (
                torch.from_numpy(cu_q).to(device=device, dtype=torch.int32),
                torch.from_numpy(cu_k).to(device=device, dtype=torch.int32),
                int(self.query_lengths.max()),
                int(self.key_lengths.max()),
                gather,
            )

        return self._cached(("flash", str(device)), build)

    def keys_of(self, segment: int) -> np.ndarray:
        """Packed positions of the keys segment `segment` attends to, in order."""
        if self.key_positions is None:
            start = self.query_starts[segment]
            return np.arange(start, start + self.query_lengths[segment])
        offset = int(self.key_lengths[:segment].sum())
        return self.key_positions[offset : offset + self.key_lengths[segment]]

    def buckets(self, device: torch.device) -> tuple[list[_Bucket], torch.Tensor]:
        """The SDPA buckets and the permutation that puts their kept outputs back in packed order (built once)."""
        return self._cached(("sdpa", str(device)), lambda: _build_buckets(self, device))


class _Bucket:
    """Segments of similar size padded to one [n, longest queries, longest keys] SDPA call."""

    __slots__ = ("count", "query_width", "key_width", "query_index", "key_index", "mask", "kept")

    def __init__(self, segments: VarlenSegments, members: list[int], device: torch.device) -> None:
        lq, lk = segments.query_lengths[members], segments.key_lengths[members]
        self.count, self.query_width, self.key_width = len(members), int(lq.max()), int(lk.max())
        starts = segments.query_starts[members]
        offsets = np.arange(self.query_width)[None, :]
        # Padding queries point at the segment's first query (any valid position: their output is dropped).
        query_index = np.where(offsets < lq[:, None], starts[:, None] + offsets, starts[:, None])
        key_index = np.empty((self.count, self.key_width), dtype=np.int64)
        for slot, segment in enumerate(members):
            keys = segments.keys_of(segment)
            key_index[slot, : keys.size], key_index[slot, keys.size :] = keys, keys[0]
        kept = (offsets < lq[:, None]).reshape(-1).nonzero()[0]
        self.query_index = torch.from_numpy(query_index.reshape(-1)).to(device)
        self.key_index = torch.from_numpy(key_index.reshape(-1)).to(device)
        self.kept = torch.from_numpy(kept).to(device)
        if (lq == self.query_width).all() and (lk == self.query_width).all():
            self.mask = None  # square segments of one length: plain causal attention, the fast kernel
            return
        queries = torch.from_numpy(lq).to(device)[:, None, None]
        keys = torch.from_numpy(lk).to(device)[:, None, None]
        rows = torch.arange(self.query_width, device=device)[None, :, None]
        columns = torch.arange(self.key_width, device=device)[None, None, :]
        # Query i sees keys 0 .. i + lk - lq; a padding query sees key 0 only (finite softmax, zero gradient).
        mask = ((columns <= rows + keys - queries) & (rows < queries)) | ((rows >= queries) & (columns == 0))
        self.mask = mask[:, None]


def _bucket_members(segments: VarlenSegments) -> list[list[int]]:
    """Segments grouped so that each group's padded area stays within `BUCKET_SLACK` of its own area."""
    lq, lk = segments.query_lengths, segments.key_lengths
    order = sorted(range(lq.size), key=lambda s: (-int(lk[s]), -int(lq[s]), s))
    groups: list[list[int]] = []
    current: list[int] = []
    area = widest_q = widest_k = 0
    for segment in order:
        q, k = int(lq[segment]), int(lk[segment])
        new_q, new_k = max(widest_q, q), max(widest_k, k)
        if current and (len(current) + 1) * new_q * new_k > BUCKET_SLACK * (area + q * k) + BUCKET_FLOOR:
            groups.append(current)
            current, area, new_q, new_k = [], 0, q, k
        current.append(segment)
        area, widest_q, widest_k = area + q * k, new_q, new_k
    groups.append(current)
    return groups


def _build_buckets(segments: VarlenSegments, device: torch.device) -> tuple[list[_Bucket], torch.Tensor]:
    buckets = [_Bucket(segments, members, device) for members in _bucket_members(segments)]
    # The kept outputs come out bucket by bucket; `order[t]` is the packed position of the t-th of them.
    order = torch.cat([bucket.query_index[bucket.kept] for bucket in buckets])
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=device)
    return buckets, inverse


VARLEN_KERNELS = ("flash_attn", "sdpa")
"""The kernels `attend_segments` runs (see the module docstring)."""


def attend_segments(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    segments: VarlenSegments,
    scale: Optional[float] = None,
    dropout: float = 0.0,
    kernel: Optional[str] = None,
) -> torch.Tensor:
    """Varlen attention: query [T, H, D], key/value [T, Hkv, D] (H a multiple of Hkv) -> [T, H, D], with `kernel`
    (one of `VARLEN_KERNELS`; default: `varlen_kernel` of the query's device and dtype). `flash_attn` needs CUDA,
    fp16/bf16 and the flash-attn package; `sdpa` runs on any device."""
    tokens, heads, dim = query.shape
    if tokens != segments.num_tokens:
        raise ValueError(f"packed attention: {tokens} query tokens, but the segments cover {segments.num_tokens}")
    kernel = varlen_kernel(query.device, query.dtype) if kernel is None else kernel
    if kernel not in VARLEN_KERNELS:
        raise ValueError(f"packed attention: kernel must be one of {VARLEN_KERNELS}, got {kernel!r}")
    if kernel == "flash_attn":  # pragma: no cover - needs CUDA and the flash-attn package (tests marked `gpu`)
        from flash_attn import flash_attn_varlen_func

        # causal aligned at the end of each segment, grouped-query heads native
        cu_q, cu_k, max_q, max_k, gather = segments.flash_arguments(query.device)
        if gather is not None:
            key, value = key.index_select(0, gather), value.index_select(0, gather)
        return flash_attn_varlen_func(
            query,
            key,
            value,
            cu_seqlens_q=cu_q,
            cu_seqlens_k=cu_k,
            max_seqlen_q=max_q,
            max_seqlen_k=max_k,
            dropout_p=dropout,
            softmax_scale=scale,
            causal=True,
        )
    kv_heads = key.shape[1]
    buckets, inverse = segments.buckets(query.device)
    outputs = []
    for bucket in buckets:
        n, lq, lk = bucket.count, bucket.query_width, bucket.key_width
        q = query.index_select(0, bucket.query_index).view(n, lq, heads, dim).transpose(1, 2)
        k = key.index_select(0, bucket.key_index).view(n, lk, kv_heads, dim).transpose(1, 2)
        v = value.index_select(0, bucket.key_index).view(n, lk, kv_heads, dim).transpose(1, 2)
        out = functional.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=bucket.mask,
            dropout_p=dropout,
            is_causal=bucket.mask is None,
            scale=scale,
            enable_gqa=kv_heads != heads,
        )
        outputs.append(out.transpose(1, 2).reshape(n * lq, heads, dim).index_select(0, bucket.kept))
    return torch.cat(outputs).index_select(0, inverse)


@functools.cache
def flash_attn_installed() -> bool:
    """Whether the `flash-attn` package can be imported (looked up once)."""
    return importlib.util.find_spec("flash_attn") is not None


def varlen_kernel(device: torch.device, dtype: torch.dtype) -> str:
    """The kernel packed attention uses for tensors on `device` of `dtype`: `flash_attn` on CUDA in fp16/bf16 with
    flash-attn installed, else `sdpa`."""
    if device.type == "cuda" and dtype in (torch.float16, torch.bfloat16) and flash_attn_installed():
        return "flash_attn"
    return "sdpa"


_UNSUPPORTED = {
    "sliding_window": "sliding-window layers",
    "softcap": "logit soft-capping",
    "s_aux": "attention sinks",
    "position_bias": "attention position biases",
}
"""Attention-function arguments some models pass that the varlen kernels do not implement, and what they are."""


def packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    packed_segments: Optional[Any] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Hugging Face attention function (`PACKED_ATTENTION`): query [1, H, T, D], key/value [1, Hkv, T, D] ->
    ([1, T, H, D], None). Without `packed_segments` it is SDPA with the mask the model built. `packed_segments` is a
    `VarlenSegments`, or on a sequence-parallel rank a `models.ulysses.SequenceShards`, whose `attend` runs it."""
    if packed_segments is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError(f"packed attention needs one packed sequence (batch size 1), got batch size {query.shape[0]}")
    for feature in _UNSUPPORTED:
        if kwargs.get(feature) is not None:
            raise ValueError(
                f"packed attention does not support {_UNSUPPORTED[feature]} ({type(module).__name__} passes "
                f"{feature}); set trainer.remove_microbatch_padding=false to run this model unpacked"
            )
    q, k, v = (tensor[0].transpose(0, 1) for tensor in (query, key, value))
    if not isinstance(packed_segments, VarlenSegments):  # one rank's slice of a sequence-parallel forward
        return packed_segments.attend(q, k, v, scale=scaling, dropout=dropout).unsqueeze(0), None
    return attend_segments(q, k, v, packed_segments, scale=scaling, dropout=dropout).unsqueeze(0), None


def packed_attention_mask(*args: Any, attention_mask: Optional[torch.Tensor] = None, **kwargs: Any) -> Any:
    """Mask builder of `PACKED_ATTENTION`: no mask for a packed call (no padding mask, no cache: the segments say who
    attends to whom; building the T x T mask transformers would infer from the position ids is what packing avoids),
    SDPA's mask for every other call."""
    no_cache = kwargs.get("q_length") == kwargs.get("kv_length") and not kwargs.get("kv_offset")
    if attention_mask is None and no_cache:
        return None
    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


AttentionInterface.register(PACKED_ATTENTION, packed_attention)
AttentionMaskInterface.register(PACKED_ATTENTION, packed_attention_mask)
