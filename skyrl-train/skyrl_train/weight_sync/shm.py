"""The `shm` strategy: chunks passed through POSIX shared memory to engines on the sender's machine (CPU twin of
`cuda_ipc`).

For each chunk the sender creates a `multiprocessing.shared_memory` block, packs the tensors into it and sends its
name through Ray; each engine maps the block, copies the tensors into its model and unmaps it; once every engine
acknowledged, the sender unlinks the block. Only one chunk's bytes exist in shared memory at a time.
"""

from __future__ import annotations

import contextlib
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import ray
import torch

from skyrl_train.weight_sync.base import WeightChunk, WeightReceiver, WeightSender, WeightSyncError
from skyrl_train.weight_sync.chunks import dtype_from_name, unpack
from skyrl_train.weight_sync.strategy import WeightSyncStrategy, register_weight_sync_strategy


def _attach(name: str) -> shared_memory.SharedMemory:
    """Map an existing block without adopting it: the sender owns (and unlinks) it."""
    try:
        return shared_memory.SharedMemory(name=name, track=False)  # Python >= 3.13
    except TypeError:
        block = shared_memory.SharedMemory(name=name)
        resource_tracker.unregister(block._name, "shared_memory")  # else this process "cleans it up" at exit
        return block


class SharedMemorySender(WeightSender):
    """Writes each chunk into a fresh shared-memory block on this machine."""

    def __init__(self, init_info: dict[str, Any]) -> None:
        super().__init__(init_info)
        here = ray.get_runtime_context().get_node_id()
        elsewhere = [index for index, node in enumerate(init_info["engine_node_ids"]) if node != here]
        if elsewhere:
            raise WeightSyncError(
                f"shm weight sync needs every engine on the sender's node; engines {elsewhere} run elsewhere "
                "(use weight_sync_backend=broadcast)"
            )

    def send_chunk(self, tensors: list[torch.Tensor], chunk: WeightChunk) -> None:
        """Pack the chunk into a new block, let the engines copy it, then unlink the block."""
        nbytes = sum(tensor.numel() * tensor.element_size() for tensor in tensors)
        block = shared_memory.SharedMemory(create=True, size=max(nbytes, 1))
        try:
            target = torch.frombuffer(block.buf, dtype=torch.uint8, count=nbytes)
            offset = 0
            for tensor in tensors:
                size = tensor.numel() * tensor.element_size()
                target[offset : offset + size].copy_(tensor.reshape(-1).view(torch.uint8))
                offset += size
            del target
            chunk.payload = {"shm_name": block.name, "nbytes": nbytes}
            self.wait_engines(self.notify_engines(chunk), chunk)
        finally:
            block.close()
            block.unlink()


class SharedMemoryReceiver(WeightReceiver):
    """Maps each chunk's block and copies the tensors into the engine's model."""

    async def receive(self, chunk: WeightChunk) -> int:
        """Install tensors viewed straight from the block (the engine copies them), then unmap it."""
        block = _attach(chunk.payload["shm_name"])
        named = None
        try:
            raw = torch.frombuffer(block.buf, dtype=torch.uint8, count=chunk.payload["nbytes"])
            named = unpack(raw.view(dtype_from_name(chunk.dtype)), chunk.names, chunk.shapes)
            del raw
            return await self.install(chunk, named)
        finally:
            named = None
            with contextlib.suppress(BufferError):  # a failed install's traceback may still hold views
                block.close()


@register_weight_sync_strategy("shm", builtin=True)
class SharedMemoryStrategy(WeightSyncStrategy):
    """Weights through shared memory; the sender and every engine must be on one machine."""

    sender_cls = SharedMemorySender
    receiver_cls = SharedMemoryReceiver

    def build_init_infos(
        self, common: dict[str, Any], engine_infos: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Nothing beyond the shared fields: the block names travel with each chunk."""
        if common["device"] != "cpu":
            raise WeightSyncError(f"shm weight sync serves CPU engines; these run on {common['device']} (use cuda_ipc)")
        return dict(common), [dict(common) for _ in engine_infos]
