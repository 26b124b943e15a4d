"""Stand-alone process groups for weight sync, built from a TCPStore without touching the default group.

`torch.distributed.init_process_group` may be called at most once per process and the policy workers already use it
for FSDP, so the sync group is constructed directly: a client `TCPStore` (the coordinator hosts the server), a
`PrefixStore` naming the group, and the backend's process-group class (`ProcessGroupGloo` on CPU,
`ProcessGroupNCCL` on CUDA). Collectives are called on the returned object, never through `torch.distributed.*`
functions, so nothing is registered globally.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

import torch
import torch.distributed as dist

from skyrl_train.utils.collectives import backend_for
from skyrl_train.utils.registry import Registry

GROUP_BUILDERS = Registry("process-group backend", "GROUP_BUILDERS.add(name, fn)")
"""Backend name -> fn(store, rank, world_size, timeout) returning a process group."""


def _build_gloo(store: dist.Store, rank: int, world_size: int, timeout: datetime.timedelta) -> dist.ProcessGroup:
    from torch.distributed import ProcessGroupGloo

    return ProcessGroupGloo(store, rank, world_size, timeout)


def _build_nccl(store: dist.Store, rank: int, world_size: int, timeout: datetime.timedelta) -> dist.ProcessGroup:
    from torch.distributed import ProcessGroupNCCL

    options = ProcessGroupNCCL.Options()
    options.is_high_priority_stream = False
    options._timeout = timeout
    return ProcessGroupNCCL(store, rank, world_size, options)


GROUP_BUILDERS.add("gloo", _build_gloo, builtin=True)
GROUP_BUILDERS.add("nccl", _build_nccl, builtin=True)


def backend_for_device(device: str) -> str:
    """`gloo` for a CPU device, `nccl` for CUDA (`cuda:1` counts as `cuda`): the workers' own device mapping."""
    return backend_for(torch.device(device))


def host_store(host: str, timeout_s: float) -> dist.TCPStore:
    """Start a TCPStore server on a free port of `host` (read it from `.port`); clients join with `join_group`."""
    return dist.TCPStore(host, 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=timeout_s))


def join_group(
    host: str, port: int, group_name: str, rank: int, world_size: int, backend: str, timeout_s: float
) -> dist.ProcessGroup:
    """Join the stand-alone group `group_name` as `rank` of `world_size`; blocks until every rank joined."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, is_master=False, timeout=timeout)
    builder: Callable[..., dist.ProcessGroup] = GROUP_BUILDERS.get(backend)
    return builder(dist.PrefixStore(f"{group_name}/", store), rank, world_size, timeout)


def broadcast_from_rank0(group: dist.ProcessGroup, tensor: torch.Tensor) -> None:
    """Broadcast `tensor` in place from rank 0 of `group` to every other rank (blocking)."""
    options = dist.BroadcastOptions()
    options.rootRank = 0
    options.rootTensor = 0
    group.broadcast([tensor], options).wait()
