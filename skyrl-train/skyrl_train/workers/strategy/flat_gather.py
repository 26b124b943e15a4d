"""Gather a small FSDP2 model's full state to rank 0 in one collective instead of one per parameter.

`get_model_state_dict(full_state_dict=True)` redistributes every sharded parameter on its own: for the tiny models
this project trains on CPU that is a few dozen gloo all-gathers a weight sync, most of their time per-call cost.
Every FSDP2 shard is a dim-0 `torch.chunk` of its parameter, so each rank can compute every other rank's shard sizes:
the ranks pack their shards into one flat buffer, all-gather the buffers once, and rank 0 cuts them back into whole
tensors. Only for CPU models of at most `MAX_FLAT_GATHER_BYTES` on a 1-D mesh; anything else returns None and the
caller takes the general path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Optional

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard

MAX_FLAT_GATHER_BYTES = 256 * 1024 * 1024
"""Largest model gathered in one buffer (every rank holds the whole gathered model for a moment)."""


def shard_rows(rows: int, world_size: int, rank: int) -> tuple[int, int]:
    """(start, stop) of the dim-0 rows that `rank` holds of a `rows`-row parameter (`torch.chunk` layout, as FSDP2
    shards; trailing ranks may hold none)."""
    size = math.ceil(rows / world_size) if rows else 0
    start = min(rows, rank * size)
    return start, min(rows, start + size)


def flat_full_state_dict(model: torch.nn.Module) -> Optional[dict[str, torch.Tensor]]:
    """The model's whole state on rank 0 ({} on other ranks), gathered in one all-gather; None when the model does
    not fit the fast path (not on CPU, a 2-D mesh, other placements, mixed dtypes, too large). Every rank must call
    this, and every rank gets the same answer about the fast path (the checks depend only on the model's layout)."""
    if not dist.is_initialized():
        return None
    world, rank = dist.get_world_size(), dist.get_rank()
    state = model.state_dict()
    first_name: dict[int, str] = {}  # tied weights (one parameter under two names) are gathered once
    for name, value in state.items():
        first_name.setdefault(id(value), name)
    sharded = {
        name: value for name, value in state.items() if isinstance(value, DTensor) and first_name[id(value)] == name
    }
    if not sharded:
        return None
    dtypes = {value.dtype for value in sharded.values()}
    if len(dtypes) != 1:
        return None
    dtype = dtypes.pop()
    total_bytes = sum(value.numel() * value.element_size() for value in sharded.values())
    for value in sharded.values():
        if (
            value.device.type != "cpu"
            or value.device_mesh.ndim != 1
            or value.device_mesh.size() != world
            or tuple(value.placements) != (Shard(0),)
        ):
            return None
    if total_bytes > MAX_FLAT_GATHER_BYTES:
        return None

    def shard_numel(shape: torch.Size, of_rank: int) -> int:
        start, stop = shard_rows(shape[0], world, of_rank)
        return (stop - start) * math.prod(shape[1:])

    local_parts = []
    for value in sharded.values():
        local = value.to_local()
        if local.numel() != shard_numel(value.shape, rank):
            raise RuntimeError(
                f"FSDP2 shard of shape {tuple(local.shape)} on rank {rank} is not the torch.chunk layout of "
                f"{tuple(value.shape)}; the flat gather cannot place it"
            )
        local_parts.append(local.detach().reshape(-1))
    lengths = [sum(shard_numel(value.shape, r) for value in sharded.values()) for r in range(world)]
    width = max(lengths)
    flat = torch.zeros(width, dtype=dtype)
    joined = torch.cat(local_parts)
    flat[: joined.numel()] = joined
    buffers = [torch.empty(width, dtype=dtype) for _ in range(world)]
    dist.all_gather(buffers, flat)
    if rank != 0:
        return {}
    offsets = [0] * world
    full: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if first_name[id(value)] != name:
            full[name] = full[first_name[id(value)]]  # a tied name: its first name came earlier
        elif name not in sharded:
            full[name] = value.detach().to("cpu", copy=True)
        else:
            pieces = []
            for r in range(world):
                count = shard_numel(value.shape, r)
                pieces.append(buffers[r][offsets[r] : offsets[r] + count])
                offsets[r] += count
            full[name] = torch.cat(pieces).reshape(value.shape)
    return full


def writable_state(model: torch.nn.Module, world_size: int) -> Optional[dict[str, torch.Tensor]]:
    """The model's state dict when every rank can write its part of each entry on its own (each DTensor a dim-0
    shard of a 1-D CPU mesh over all ranks, every other entry a CPU tensor that rank 0 writes whole); else None."""
    state = model.state_dict()
    for value in state.values():
        if value.device.type != "cpu":
            return None
        if isinstance(value, DTensor) and (
            value.device_mesh.ndim != 1
            or value.device_mesh.size() != world_size
            or tuple(value.placements) != (Shard(0),)
        ):
            return None
    return state


def storage_marks(tensors: Iterable[tuple[str, torch.Tensor]]) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Each named tensor's local memory address and shape (a DTensor's local shard): two tensors with equal marks,
    both alive, view the same memory the same way."""
    marks = {}
    for name, tensor in tensors:
        local = _local_tensor(tensor) if isinstance(tensor, DTensor) else tensor
        marks[name] = (local.data_ptr(), tuple(local.shape))
    return marks


def _local_tensor(tensor: DTensor) -> torch.Tensor:
    """A DTensor's local shard: its `_local_tensor` attribute where torch has one (reading it costs nothing, where
    `to_local()` is an autograd function call per tensor)."""
    local = getattr(tensor, "_local_tensor", None)
    return local if isinstance(local, torch.Tensor) else tensor.to_local()
