"""The `cuda_ipc` strategy (GPU only): engines on the sender's GPU map each chunk's CUDA buffer through CUDA IPC.

The sender packs a chunk into one CUDA buffer and shares its bytes (a `uint8` view) with
`torch.multiprocessing.reductions.reduce_tensor` (a rebuild function and its arguments, including the CUDA IPC memory
handle); each engine rebuilds the tensor on its own view of the same GPU (found by device UUID, since
`CUDA_VISIBLE_DEVICES` may number it differently), copies the tensors into its model and drops the mapping; the
sender frees the buffer once every engine acknowledged. An engine whose model lives in other processes (SGLang's
tensor-parallel workers) hands the handles on to them unopened, as one flat byte bucket.

Only a process that sees the sender's GPU can open its handles, and Ray shows each GPU actor only its own bundle's
GPU: on a colocated run this reaches the engine in policy rank 0's bundle, not the engines on the other GPUs.
`weight_sync_backend=auto` gives those `broadcast` (`locations.plan_weight_sync`); naming `cuda_ipc` for them is
refused when the sender starts. Every consumer (an engine, or each tensor-parallel worker of one: its `sync_ranks`)
gets a handle of its own: torch counts the opened mappings of one handle in one slot, which several consumers would
drive below zero.
`shm` is this strategy's CPU twin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import ray
import torch
from torch.multiprocessing.reductions import reduce_tensor

from skyrl_train.weight_sync.base import WeightChunk, WeightReceiver, WeightSender, WeightSyncError
from skyrl_train.weight_sync.chunks import dtype_from_name, pack, unpack
from skyrl_train.weight_sync.locations import Location, check_backend, this_location
from skyrl_train.weight_sync.strategy import WeightSyncStrategy, register_weight_sync_strategy

DEVICE_ARGUMENT = 6
"""Position of the device index among `rebuild_cuda_tensor`'s arguments (torch/multiprocessing/reductions.py)."""


def device_uuid(device: torch.device) -> str:
    """The GPU's UUID, the same in every process whatever `CUDA_VISIBLE_DEVICES` says."""
    return str(torch.cuda.get_device_properties(device).uuid)


def local_device_index(uuid: str) -> int:
    """Index, in this process, of the GPU with `uuid`; an error when this process cannot see it."""
    for index in range(torch.cuda.device_count()):
        if device_uuid(torch.device("cuda", index)) == uuid:
            return index
    raise WeightSyncError(
        f"cuda_ipc: this engine cannot see the sender's GPU {uuid}; only engines on policy rank 0's GPU can take "
        "cuda_ipc: use weight_sync_backend=auto (broadcast for the others)"
    )


def share_per_consumer(
    buffer: torch.Tensor, consumers: list[int], reduce: Callable[[torch.Tensor], tuple] = reduce_tensor
) -> list[list[tuple]]:
    """`reduce(buffer)` once per consumer: for each engine, `consumers[engine]` `(rebuild, arguments)` pairs, each
    with its own reference-count slot (one slot opened by several consumers would be released below zero)."""
    return [[reduce(buffer) for _ in range(count)] for count in consumers]


class CudaIpcSender(WeightSender):
    """Shares each chunk's CUDA buffer by IPC handle, one handle per consumer."""

    transport_device = "cuda"

    def __init__(self, init_info: dict[str, Any]) -> None:
        super().__init__(init_info)
        self.consumers = [int(count) for count in init_info.get("engine_sync_ranks", [1] * len(self.engine_handles))]
        engines = [Location.from_dict(where) for where in init_info.get("engine_locations", [])]
        if engines:  # the engines must see this process's GPU (a coordinator checks it too; a direct user may not)
            check_backend("cuda_ipc", this_location("cuda"), engines, "cuda")
        here = ray.get_runtime_context().get_node_id()
        elsewhere = [index for index, node in enumerate(init_info["engine_node_ids"]) if node != here]
        if elsewhere:
            raise WeightSyncError(f"cuda_ipc needs every engine on the sender's node; engines {elsewhere} are not")

    def send_chunk(self, tensors: list[torch.Tensor], chunk: WeightChunk) -> None:
        """Pack on the GPU, give every consumer its own IPC handle, keep the buffer alive until every engine copied
        it."""
        buffer = pack(tensors)
        torch.cuda.current_stream(buffer.device).synchronize()  # the engines read it from other streams
        shared = share_per_consumer(buffer.view(torch.uint8), self.consumers)
        uuid = device_uuid(buffer.device)
        try:
            refs = [
                handle.receive_weights.remote(replace(chunk, payload=ipc_payload(handles, uuid)))
                for handle, handles in zip(self.engine_handles, shared)
            ]
            self.wait_engines(refs, chunk)
        finally:
            del buffer, shared
            torch.cuda.ipc_collect()


def ipc_payload(handles: list[tuple], uuid: str) -> dict[str, Any]:
    """One engine's chunk payload: its consumers' `(rebuild, arguments)` pairs (the first also as `rebuild` and
    `arguments`, what a receiver with one consumer reads) and the GPU's UUID."""
    rebuild, arguments = handles[0]
    return {"rebuild": rebuild, "arguments": arguments, "handles": handles, "device_uuid": uuid}


class CudaIpcReceiver(WeightReceiver):
    """Rebuilds each chunk's buffer on the shared GPU and installs views of it."""

    async def receive(self, chunk: WeightChunk) -> int:
        """Map the sender's buffer, install it, synchronise, and drop the mapping."""
        arguments = list(chunk.payload["arguments"])
        arguments[DEVICE_ARGUMENT] = local_device_index(chunk.payload["device_uuid"])
        buffer = chunk.payload["rebuild"](*arguments).view(dtype_from_name(chunk.dtype))
        try:
            version = await self.install(chunk, unpack(buffer, chunk.names, chunk.shapes))
            torch.cuda.synchronize(buffer.device)
        finally:
            del buffer
        return version


@register_weight_sync_strategy("cuda_ipc", builtin=True)
class CudaIpcStrategy(WeightSyncStrategy):
    """Weights by CUDA IPC between processes sharing GPUs (colocated policy and engines)."""

    sender_cls = CudaIpcSender
    receiver_cls = CudaIpcReceiver

    def build_init_infos(
        self, common: dict[str, Any], engine_infos: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The shared fields, and for the sender each engine's consumer count (`sync_ranks`); CUDA engines are
        required."""
        if torch.device(common["device"]).type != "cuda":
            raise WeightSyncError(f"cuda_ipc needs CUDA engines; these run on {common['device']} (use shm)")
        ranks = [int(info.get("sync_ranks", 1)) for info in engine_infos]
        return {**common, "engine_sync_ranks": ranks}, [dict(common) for _ in engine_infos]
