"""Pure tensor helpers of weight sync: dtype names, byte-bounded chunk planning, casting, packing and unpacking."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

NamedTensors = list[tuple[str, torch.Tensor]]


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> `"bfloat16"` (the form sent in chunk metadata)."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    """`"bfloat16"` -> `torch.bfloat16`; anything that is not a torch dtype name is an error."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype name {name!r} is not a torch dtype (expected e.g. 'float32' or 'bfloat16')")
    return dtype


def nbytes_as(tensor: torch.Tensor, dtype: torch.dtype) -> int:
    """Bytes `tensor` takes once cast to `dtype`."""
    return tensor.numel() * torch.empty((), dtype=dtype).element_size()


def plan_chunks(
    named_tensors: Sequence[tuple[str, torch.Tensor]], chunk_bytes: int, dtype: torch.dtype
) -> list[NamedTensors]:
    """Split tensors, in order, into chunks of at most `chunk_bytes` bytes after casting to `dtype`.

    A tensor larger than `chunk_bytes` gets a chunk of its own; order is kept so receivers see names in send order.
    """
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
    chunks: list[NamedTensors] = []
    current: NamedTensors = []
    current_bytes = 0
    for name, tensor in named_tensors:
        size = nbytes_as(tensor, dtype)
        if current and current_bytes + size > chunk_bytes:
            chunks.append(current)
            current, current_bytes = [], 0
        current.append((name, tensor))
        current_bytes += size
    if current:
        chunks.append(current)
    return chunks


def cast_tensors(named_tensors: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype, device: str) -> NamedTensors:
    """Detach, move to `device`, cast to `dtype` and make contiguous (no copy when nothing changes)."""
    return [(name, tensor.detach().to(device=device, dtype=dtype).contiguous()) for name, tensor in named_tensors]


def pack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Concatenate same-dtype tensors into one flat buffer (the order `unpack` expects)."""
    if not tensors:
        raise ValueError("pack needs at least one tensor")
    dtypes = {tensor.dtype for tensor in tensors}
    if len(dtypes) != 1:
        raise ValueError(f"pack needs tensors of one dtype, got {sorted(map(str, dtypes))}")
    return torch.cat([tensor.reshape(-1) for tensor in tensors])


def unpack(buffer: torch.Tensor, names: Sequence[str], shapes: Sequence[Sequence[int]]) -> NamedTensors:
    """Views of a flat `buffer` cut into tensors of `shapes`, paired with `names`; the sizes must add up."""
    sizes = [math.prod(shape) for shape in shapes]
    if sum(sizes) != buffer.numel():
        raise ValueError(f"unpack: shapes hold {sum(sizes)} elements but the buffer has {buffer.numel()}")
    if len(names) != len(shapes):
        raise ValueError(f"unpack: {len(names)} names for {len(shapes)} shapes")
    pieces = torch.split(buffer, sizes)
    return [(name, piece.view(tuple(shape))) for name, piece, shape in zip(names, pieces, shapes)]
