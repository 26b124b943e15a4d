"""Stand-alone process groups for weight sync, built from a TCPStore without touching the default group.

`torch.distributed.init_process_group` may be called at most once per process and the policy workers already use it
for FSDP, so the sync group is constructed directly: a client `TCPStore` (the coordinator hosts the server), the
store keys of the group (`group_store`), and the backend's process-group class (`ProcessGroupGloo` on CPU,
`ProcessGroupNCCL` on CUDA). Collectives are called on the returned object, never through `torch.distributed.*`
functions, so nothing is registered globally.

The keys are laid out the way a process that creates the group through torch's own helpers does it: SGLang's
`init_weights_update_group` connects to the same store (`tcp://host:port`), wraps it in a `PrefixStore` named after
the group, and builds the backend with `torch.distributed`'s `_new_process_group_helper`, which adds the group name
and the device type. With the same nesting here, SGLang's tensor-parallel workers and our own ranks join one group.

The store also carries a readiness count per chunk (`mark_ready`, `wait_ready`): the sender starts a chunk's
collective only once every receiving rank is about to join it. A collective started early waits on the GPU, where
NCCL's watchdog aborts it (and the policy rank with it) after the group's timeout; an SGLang engine joins only after
its in-flight generate calls finished, which may take longer. Waiting on the store instead is bounded by its own,
longer timeout, ends early when a receiver fails, and fails with a `WeightSyncError` naming what was not ready.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from skyrl_train.utils.collectives import backend_for
from skyrl_train.utils.registry import Registry
from skyrl_train.weight_sync.base import WeightSyncError

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


GROUP_DEVICES = {"gloo": "cpu", "nccl": "cuda"}
"""The device type each built-in process-group backend serves (part of the store keys; a backend registered by a
user is keyed by its own name)."""


def group_store(store: dist.Store, group_name: str, backend: str) -> dist.Store:
    """The view of `store` a rank of group `group_name` uses: `<group>/<group>//<device>//<key>`.

    The outer prefix is the one `init_custom_process_group` (SGLang's, as used by its `init_weights_update_group`)
    adds; the inner two are those of torch's `_new_process_group_helper` for a backend of one device type (`nccl`;
    `cpu:gloo` on CPU), so a rank created through those helpers and a rank created here find the same keys.
    """
    outer = dist.PrefixStore(group_name, store)
    named = dist.PrefixStore(f"{group_name}/", outer)
    return dist.PrefixStore(f"{GROUP_DEVICES.get(backend, backend)}/", named)


def connect_store(host: str, port: int, timeout_s: float) -> dist.TCPStore:
    """A client of the coordinator's store (`host_store`)."""
    return dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s))


def join_group(
    host: str,
    port: int,
    group_name: str,
    rank: int,
    world_size: int,
    backend: str,
    timeout_s: float,
    store: dist.Store | None = None,
) -> dist.ProcessGroup:
    """Join the stand-alone group `group_name` as `rank` of `world_size` (through `store`, a client of the
    coordinator's store, or a new one); blocks until every rank joined."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    timeout = datetime.timedelta(seconds=timeout_s)
    store = store if store is not None else connect_store(host, port, timeout_s)
    builder: Callable[..., dist.ProcessGroup] = GROUP_BUILDERS.get(backend)
    group = builder(group_store(store, group_name, backend), rank, world_size, timeout)
    group._set_sequence_number_for_group()  # as torch's helper does after building a gloo or nccl backend
    return group


def broadcast_from_rank0(group: dist.ProcessGroup, tensor: torch.Tensor) -> None:
    """Broadcast `tensor` in place from rank 0 of `group` to every other rank (blocking)."""
    options = dist.BroadcastOptions()
    options.rootRank = 0
    options.rootTensor = 0
    group.broadcast([tensor], options).wait()


def mark_ready(store: dist.Store, key: str, ranks: int, receivers: int) -> None:
    """Count `ranks` more receiving ranks as ready to join the collective behind `key`; the one completing the count
    of `receivers` sets `<key>/all`, what `wait_ready` waits for."""
    if store.add(key, ranks) == receivers:
        store.set(f"{key}/all", "1")


def wait_ready(store: dist.Store, key: str, timeout_s: float, check: Callable[[], None], poll_s: float = 0.2) -> None:
    """Block until every receiver marked `key` ready (`mark_ready`), then delete its keys. `check` runs between
    waits and raises when a receiver failed instead (so a dead engine ends the wait at once); after `timeout_s` a
    `WeightSyncError` says how many receiving ranks were ready."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            store.wait([f"{key}/all"], datetime.timedelta(seconds=min(poll_s, max(deadline - time.monotonic(), 0.001))))
            break
        except dist.DistStoreError:
            check()
            if time.monotonic() >= deadline:
                ready = store.add(key, 0)
                raise WeightSyncError(
                    f"weight sync: only {ready} receiving rank(s) were ready to join the broadcast after {timeout_s:g} s "
                    "(an engine still finishing its in-flight generate calls, or one that never got the chunk)"
                ) from None
    store.delete_key(f"{key}/all")
    store.delete_key(key)
