"""The `cuda_ipc` strategy (GPU only): engines on the sender's GPUs map each chunk's CUDA buffer through CUDA IPC.

The sender packs a chunk into one CUDA buffer and shares its bytes (a `uint8` view) with
`torch.multiprocessing.reductions.reduce_tensor` (a rebuild function and its arguments, including the CUDA IPC memory
handle); each engine rebuilds the tensor on its own view of the same GPU (found by device UUID, since
`CUDA_VISIBLE_DEVICES` may number it differently), copies the tensors into its model and drops the mapping; the
sender frees the buffer once every engine acknowledged. An engine whose model lives in another process (SGLang) may
hand the handle on to that process unopened, as one flat byte bucket.
`shm` is this strategy's CPU twin.
"""

from __future__ import annotations

from typing import Any

import ray
import torch
from torch.multiprocessing.reductions import reduce_tensor

from skyrl_train.weight_sync.base import WeightChunk, WeightReceiver, WeightSender, WeightSyncError
from skyrl_train.weight_sync.chunks import dtype_from_name, pack, unpack
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
        f"cuda_ipc: this engine cannot see the sender's GPU {uuid}; colocate the engines with the policy or use "
        "weight_sync_backend=broadcast"
    )


class CudaIpcSender(WeightSender):
    """Shares each chunk's CUDA buffer by IPC handle."""

    transport_device = "cuda"

    def __init__(self, init_info: dict[str, Any]) -> None:
        super().__init__(init_info)
        here = ray.get_runtime_context().get_node_id()
        elsewhere = [index for index, node in enumerate(init_info["engine_node_ids"]) if node != here]
        if elsewhere:
            raise WeightSyncError(f"cuda_ipc needs every engine on the sender's node; engines {elsewhere} are not")

    def send_chunk(self, tensors: list[torch.Tensor], chunk: WeightChunk) -> None:
        """Pack on the GPU, publish the IPC handle, keep the buffer alive until every engine copied it."""
        buffer = pack(tensors)
        torch.cuda.current_stream(buffer.device).synchronize()  # the engines read it from other streams
        rebuild, arguments = reduce_tensor(buffer.view(torch.uint8))
        chunk.payload = {"rebuild": rebuild, "arguments": arguments, "device_uuid": device_uuid(buffer.device)}
        try:
            self.wait_engines(self.notify_engines(chunk), chunk)
        finally:
            del buffer
            torch.cuda.ipc_collect()


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
        """Nothing beyond the shared fields; CUDA engines are required."""
        if torch.device(common["device"]).type != "cuda":
            raise WeightSyncError(f"cuda_ipc needs CUDA engines; these run on {common['device']} (use shm)")
        return dict(common), [dict(common) for _ in engine_infos]
