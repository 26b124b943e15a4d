"""The sglang engine's receivers for the `broadcast` and `cuda_ipc` weight syncs: SGLang's workers take the bytes.

The generic receivers install each chunk into a model held by the engine actor; SGLang's model lives in its
scheduler processes (one per tensor-parallel rank), so these receivers hand each chunk to them instead, unchanged
in layout (`sglang_convert.byte_bucket_layout`: the chunk's bytes are SGLang's `flattened_bucket`):

- `broadcast`: at init every tensor-parallel worker joins the strategy's process group through SGLang's
  `init_weights_update_group` (the coordinator's store as master, ranks from the engine's first rank); each chunk is
  one `update_weights_from_distributed(load_format="flattened_bucket")`, in which the workers receive the chunk's
  bytes from the sender (rank 0) straight into one byte bucket over NCCL. The engine counts its workers ready on the
  coordinator's store just before that call (after its in-flight generate calls finished), and the sender starts the
  broadcast only then, so NCCL's watchdog never sees a broadcast waiting for a busy engine.
- `cuda_ipc`: the sender's CUDA IPC handles (one per worker: the engine's `sync_ranks`) are passed on unopened,
  pickled as calls of torch's `rebuild_cuda_tensor` with the GPU named by UUID (SGLang's patched rebuild resolves
  it); each worker maps the sender's buffer and loads it with `update_weights_from_tensor(load_format=
  "flattened_bucket")`. No copy is made in the actor.

A sync is one SGLang weight-update session: the first chunk opens it (holding new generate calls), the final chunk
closes it, flushes the prefix cache and switches the served version.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Optional

import torch

from skyrl_train.inference.sglang_convert import byte_bucket_layout
from skyrl_train.weight_sync.base import WeightChunk, WeightReceiver
from skyrl_train.weight_sync.broadcast import mark_chunk_ready, store_of
from skyrl_train.weight_sync.chunks import dtype_from_name
from skyrl_train.weight_sync.cuda_ipc import DEVICE_ARGUMENT


class SharedCudaBytes:
    """A CUDA IPC tensor that pickles as `rebuild_cuda_tensor(*arguments)`, without being opened in this process.

    `arguments` are those `torch.multiprocessing.reductions.reduce_tensor` gave the sender; the device slot holds the
    GPU's UUID, which SGLang's `monkey_patch_torch_reductions` (applied before it unpickles) resolves to the GPU's
    index in the worker. The rebuild function is looked up when pickling, so a patched one is pickled by its own name.
    """

    def __init__(self, arguments: tuple) -> None:
        self.arguments = tuple(arguments)

    def __reduce__(self) -> tuple[Any, tuple]:
        from torch.multiprocessing import reductions

        return reductions.rebuild_cuda_tensor, self.arguments


def ipc_arguments(payload: dict[str, Any], consumer: int = 0) -> tuple:
    """The rebuild arguments of handle `consumer` of a `cuda_ipc` chunk payload (the sender made one per worker of
    the engine), with the GPU named by UUID, not by index."""
    handles = payload.get("handles") or [(None, payload["arguments"])]
    if not 0 <= consumer < len(handles):
        raise ValueError(f"cuda_ipc payload holds {len(handles)} handle(s), worker {consumer} has none of its own")
    arguments = list(handles[consumer][1])
    arguments[DEVICE_ARGUMENT] = payload["device_uuid"]
    return tuple(arguments)


def bucket_payload(chunk: WeightChunk, metadata_cls: type, consumer: int = 0) -> dict[str, Any]:
    """SGLang's `flattened_bucket` payload of worker `consumer` for a `cuda_ipc` chunk: its own handle of the shared
    bytes and one metadata per tensor."""
    dtype = dtype_from_name(chunk.dtype)
    metadata = [
        metadata_cls(name=name, shape=torch.Size(shape), dtype=dtype, start_idx=start, end_idx=end, numel=end - start)
        for name, (shape, start, end) in zip(chunk.names, byte_bucket_layout(chunk.shapes, dtype))
    ]
    return {"flattened_tensor": SharedCudaBytes(ipc_arguments(chunk.payload, consumer)), "metadata": metadata}


class SGLangSessionReceiver(WeightReceiver):
    """One SGLang weight-update session per sync: open at the first chunk, close (new version) at the final one."""

    async def receive(self, chunk: WeightChunk) -> int:
        """Load one chunk into SGLang's workers; returns the version served afterwards."""
        self.check_version(chunk)
        engine = self.engine
        if chunk.index == 0:
            await engine.open_weight_update()
        try:
            await self.load(chunk)
        except BaseException:
            await engine.close_weight_update(None)
            raise
        engine.record_shapes(chunk.names, chunk.shapes)
        if chunk.final:
            await engine.close_weight_update(chunk.version)
        return engine.weight_version

    @abc.abstractmethod
    async def load(self, chunk: WeightChunk) -> None:
        """Have SGLang's workers load the chunk (flushing the prefix cache with the final one)."""

    async def aclose(self) -> None:
        """Release the transport (async: it may call into SGLang)."""
        self.close()


class SGLangBroadcastReceiver(SGLangSessionReceiver):
    """SGLang's workers are ranks `rank .. rank + tp_size - 1` of the `broadcast` strategy's group."""

    @classmethod
    async def create(cls, init_info: dict[str, Any], engine: Any) -> SGLangBroadcastReceiver:
        """Join the group (returns once SGLang's workers joined; the sender joins at the same time)."""
        await engine.join_weight_group(
            init_info["store_host"],
            int(init_info["store_port"]),
            int(init_info["rank"]),
            int(init_info["world_size"]),
            init_info["group_name"],
            init_info["backend"],
        )
        receiver = cls(init_info, engine)
        receiver.store = await asyncio.to_thread(store_of, init_info)
        return receiver

    async def load(self, chunk: WeightChunk) -> None:
        """One `update_weights_from_distributed` call: the workers take the chunk's broadcast bytes. The sender
        starts the broadcast once this engine's workers are counted ready (after the session opened, i.e. after the
        in-flight generate calls finished)."""
        shapes = [list(shape) for shape in chunk.shapes]
        await asyncio.to_thread(mark_chunk_ready, self.store, chunk, self.engine.tensor_parallel_size, self.init_info)
        await self.engine.load_from_distributed(
            chunk.names, chunk.dtype, shapes, self.init_info["group_name"], flush_cache=chunk.final
        )

    async def aclose(self) -> None:
        """Leave the group."""
        await self.engine.leave_weight_group(self.init_info["group_name"])


class SGLangCudaIpcReceiver(SGLangSessionReceiver):
    """Passes each chunk's CUDA IPC handles to SGLang's workers, one pickled payload (with its own handle) per
    tensor-parallel rank."""

    @classmethod
    async def create(cls, init_info: dict[str, Any], engine: Any) -> SGLangCudaIpcReceiver:
        """Nothing to connect: the handles travel with the chunks."""
        return cls(init_info, engine)

    async def load(self, chunk: WeightChunk) -> None:
        """One `update_weights_from_tensor(load_format="flattened_bucket")` call."""
        from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorMetadata

        engine = self.engine
        payloads = [
            engine.serializer.serialize(bucket_payload(chunk, FlattenedTensorMetadata, rank))
            for rank in range(engine.tensor_parallel_size)
        ]
        await engine.load_tensor_payloads(payloads, "flattened_bucket", flush_cache=chunk.final)


SGLANG_RECEIVERS: dict[str, Callable[[dict[str, Any], Any], Awaitable[SGLangSessionReceiver]]] = {
    "broadcast": SGLangBroadcastReceiver.create,
    "cuda_ipc": SGLangCudaIpcReceiver.create,
}
"""Weight-sync strategy name -> the sglang engine's receiver factory (other strategies use the generic receivers,
which install through `update_weights`)."""


async def make_sglang_receiver(
    strategy_name: str, init_info: dict[str, Any], engine: Any
) -> Optional[SGLangSessionReceiver]:
    """The sglang engine's receiver for `strategy_name`, or None when the generic one serves."""
    factory = SGLANG_RECEIVERS.get(strategy_name)
    return None if factory is None else await factory(init_info, engine)
