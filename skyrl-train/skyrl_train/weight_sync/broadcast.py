"""The `broadcast` strategy: chunks broadcast from the sender (rank 0) to the engines over a dedicated process group.

The group (gloo on CPU, NCCL on CUDA) spans the sender and every engine and is built from a TCPStore the coordinator
hosts, so it leaves the workers' default group alone. Each chunk is packed into one flat buffer; its metadata goes
to the engines through Ray, then one collective moves its bytes (a `uint8` view, so a receiver may take the bytes as
one flat byte bucket, as SGLang's `update_weights_from_distributed` does). Works across machines.

An engine takes `sync_ranks` consecutive ranks (its `engine_info`, default 1): engines whose tensor-parallel workers
join the group themselves (SGLang) take one per worker; the sender is always rank 0.

Each chunk's broadcast starts once every receiving rank said, through the coordinator's store, that it is about to
join it (`process_group.mark_ready` / `wait_ready`): an SGLang engine joins only after its in-flight generate calls
finished, and a broadcast started before that would sit on the GPU until NCCL's watchdog killed the sender.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Any

import ray
import torch

from skyrl_train.weight_sync.base import WeightChunk, WeightReceiver, WeightSender, WeightSyncError, WeightTarget
from skyrl_train.weight_sync.chunks import dtype_from_name, pack, unpack
from skyrl_train.weight_sync.process_group import (
    backend_for_device,
    broadcast_from_rank0,
    connect_store,
    host_store,
    join_group,
    mark_ready,
    wait_ready,
)
from skyrl_train.weight_sync.strategy import WeightSyncStrategy, register_weight_sync_strategy

READY_TIMEOUT_S = 3600.0
"""How long the sender waits for every receiving rank to be ready for a chunk (an engine may first finish its
in-flight generate calls); the collective itself is bounded by the strategy's `timeout_s`."""


def rank_offsets(sync_ranks: list[int]) -> list[int]:
    """First group rank of each engine (rank 0 is the sender), then the group's world size: `[1, 1 + r0, ...]`."""
    offsets = [1]
    for index, count in enumerate(sync_ranks):
        if count < 1:
            raise ValueError(f"engine {index} reports sync_ranks={count}; every engine takes at least one rank")
        offsets.append(offsets[-1] + count)
    return offsets


def _join(init_info: dict[str, Any], store: Any) -> Any:
    return join_group(
        init_info["store_host"],
        init_info["store_port"],
        init_info["group_name"],
        init_info["rank"],
        init_info["world_size"],
        init_info["backend"],
        init_info["timeout_s"],
        store=store,
    )


def store_of(init_info: dict[str, Any]) -> Any:
    """A client of the coordinator's store named in a `broadcast` init_info."""
    return connect_store(init_info["store_host"], init_info["store_port"], init_info["timeout_s"])


def mark_chunk_ready(store: Any, chunk: WeightChunk, ranks: int, init_info: dict[str, Any]) -> None:
    """Tell the sender that `ranks` more receiving ranks are about to join `chunk`'s broadcast."""
    mark_ready(store, chunk.payload["ready_key"], ranks, init_info["world_size"] - 1)


class BroadcastSender(WeightSender):
    """Rank 0 of the sync group: packs each chunk, waits until every receiving rank is ready, broadcasts it."""

    def __init__(self, init_info: dict[str, Any]) -> None:
        super().__init__(init_info)
        self.transport_device = init_info["device"]
        self.ready_timeout_s = float(init_info.get("ready_timeout_s", READY_TIMEOUT_S))
        self.store = store_of(init_info)
        self.group = _join(init_info, self.store)

    def send_chunk(self, tensors: list[torch.Tensor], chunk: WeightChunk) -> None:
        """Tell the engines the chunk's layout, wait until they are ready, broadcast its bytes, wait for them to
        install it."""
        buffer = pack(tensors)
        key = f"{self.init_info['group_name']}/ready/{uuid.uuid4().hex}"
        chunk = replace(chunk, payload={**chunk.payload, "ready_key": key})
        refs = self.notify_engines(chunk)
        wait_ready(self.store, key, self.ready_timeout_s, lambda: self.raise_if_finished(refs, chunk))
        broadcast_from_rank0(self.group, buffer.view(torch.uint8))
        self.wait_engines(refs, chunk)

    def raise_if_finished(self, refs: list[ray.ObjectRef], chunk: WeightChunk) -> None:
        """While waiting for readiness: an engine whose call already returned failed before joining; raise its
        error (naming the engine) instead of waiting on."""
        finished, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if finished:
            self.wait_engines([ref for ref in refs if ref in finished], chunk)
            raise WeightSyncError(f"an engine acknowledged chunk {chunk.index} without joining its broadcast")

    def close(self) -> None:
        """Drop the group."""
        self.group = None


class BroadcastReceiver(WeightReceiver):
    """An engine's rank in the sync group: receives each chunk's buffer and installs its views."""

    def __init__(self, init_info: dict[str, Any], engine: WeightTarget) -> None:
        super().__init__(init_info, engine)
        self.device = init_info["device"]
        self.store = store_of(init_info)
        self.group = _join(init_info, self.store)

    async def receive(self, chunk: WeightChunk) -> int:
        """Join the chunk's broadcast (in a thread, so the engine keeps serving) and install the result."""
        dtype = dtype_from_name(chunk.dtype)
        buffer = torch.empty(chunk.numel * dtype.itemsize, dtype=torch.uint8, device=self.device)
        mark_chunk_ready(self.store, chunk, 1, self.init_info)
        await asyncio.to_thread(broadcast_from_rank0, self.group, buffer)
        return await self.install(chunk, unpack(buffer.view(dtype), chunk.names, chunk.shapes))

    def close(self) -> None:
        """Drop the group."""
        self.group = None


@register_weight_sync_strategy("broadcast", builtin=True)
class BroadcastStrategy(WeightSyncStrategy):
    """Weights broadcast over a dedicated gloo/NCCL group: sender rank 0, then each engine's `sync_ranks` ranks in
    engine order (engine i starts at `1 + sum of the ranks before it`)."""

    sender_cls = BroadcastSender
    receiver_cls = BroadcastReceiver

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._store = None

    def build_init_infos(
        self, common: dict[str, Any], engine_infos: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Host the rendezvous store here and give every side its rank."""
        host = ray.util.get_node_ip_address()
        self._store = host_store(host, self.timeout_s)
        first_ranks = rank_offsets([int(info.get("sync_ranks", 1)) for info in engine_infos])
        group = {
            **common,
            "store_host": host,
            "store_port": self._store.port,
            "group_name": f"skyrl_weight_sync_{uuid.uuid4().hex[:8]}",
            "world_size": first_ranks[-1],
            "backend": backend_for_device(common["device"]),
        }
        return {**group, "rank": 0}, [{**group, "rank": rank} for rank in first_ranks[:-1]]

    async def close(self) -> None:
        """Release both sides and stop the rendezvous store."""
        await super().close()
        self._store = None
