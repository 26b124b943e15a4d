"""The `shm` strategy: chunks passed through POSIX shared memory to engines on the sender's machine (CPU twin of
`cuda_ipc`).

The sender keeps one `multiprocessing.shared_memory` block for all its syncs: for each chunk it packs the tensors into
the block and sends the block's name through Ray; each engine maps the block (once, then keeps the mapping), copies
the tensors into its model and acknowledges; only then does the sender pack the next chunk. A chunk larger than the
block replaces it with a bigger one (the engines then map the new name and drop the old mapping). Only one chunk's
bytes exist in shared memory at a time; the block is unlinked when the sender closes, and a block whose sender was
killed first (Ray's kill takes Python's resource tracker with it) is unlinked by the next sender (`shm_blocks`).

Keeping the block saves what a fresh block per chunk costs on every sync: creating and sizing it, the page faults of
first touching it on both sides, and the resource-tracker messages of creating, attaching and unlinking it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from multiprocessing import resource_tracker, shared_memory
from typing import Any, Optional

import ray
import torch

from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.weight_sync.base import SendResult, WeightChunk, WeightReceiver, WeightSender, WeightSyncError
from skyrl_train.weight_sync.chunks import dtype_from_name, unpack
from skyrl_train.weight_sync.shm_blocks import create_block, remove_orphaned_blocks
from skyrl_train.weight_sync.strategy import WeightSyncStrategy, register_weight_sync_strategy


def attach_block(name: str) -> shared_memory.SharedMemory:
    """Map an existing block without adopting it: the sender owns (and unlinks) it."""
    try:
        return shared_memory.SharedMemory(name=name, track=False)  # Python >= 3.13
    except TypeError:
        block = shared_memory.SharedMemory(name=name)
        resource_tracker.unregister(block._name, "shared_memory")  # else this process "cleans it up" at exit
        return block


class MappedBlock:
    """A block another process owns, mapped by name (`attach_block`) and kept mapped from chunk to chunk until a
    chunk names another block (its owner replaced it with a bigger one); closing unmaps it, never unlinks it."""

    def __init__(self) -> None:
        self.block: Optional[shared_memory.SharedMemory] = None

    def get(self, name: str) -> shared_memory.SharedMemory:
        """The block called `name` (a leading `/` aside), mapped now unless it already is."""
        if self.block is not None and self.block.name.lstrip("/") != name.lstrip("/"):
            self.close()
        if self.block is None:
            self.block = attach_block(name)
        return self.block

    def close(self) -> None:
        """Unmap the block."""
        block, self.block = self.block, None
        if block is not None:
            with contextlib.suppress(BufferError):  # a failed write's or install's traceback may still hold views
                block.close()


class SharedMemorySender(WeightSender):
    """Writes each chunk into one shared-memory block on this machine, kept from sync to sync (see the module
    docstring)."""

    def __init__(self, init_info: dict[str, Any]) -> None:
        super().__init__(init_info)
        here = ray.get_runtime_context().get_node_id()
        elsewhere = [index for index, node in enumerate(init_info["engine_node_ids"]) if node != here]
        if elsewhere:
            raise WeightSyncError(
                f"shm weight sync needs every engine on the sender's node; engines {elsewhere} run elsewhere "
                "(use weight_sync_backend=broadcast)"
            )
        self.block: Optional[shared_memory.SharedMemory] = None
        remove_orphaned_blocks()

    def send_chunk(self, tensors: list[torch.Tensor], chunk: WeightChunk) -> None:
        """Pack the chunk into the block (a bigger one when it does not fit) and return once every engine copied it."""
        nbytes = sum(tensor.numel() * tensor.element_size() for tensor in tensors)
        block = self.block_for(nbytes)
        if nbytes:  # a chunk of empty tensors has nothing to pack
            target = torch.frombuffer(block.buf, dtype=torch.uint8, count=nbytes)
            offset = 0
            for tensor in tensors:
                size = tensor.numel() * tensor.element_size()
                target[offset : offset + size].copy_(tensor.reshape(-1).view(torch.uint8))
                offset += size
            del target  # no view may outlive the packing: the block is closed (resized) later
        chunk.payload = {"shm_name": block.name, "nbytes": nbytes}
        self.wait_engines(self.notify_engines(chunk), chunk)

    def send_written(
        self, plan: Any, version: int, write: Callable[[int], None], writers: int, defer_final: bool = False
    ) -> SendResult:
        """Send chunks that the policy ranks write into this sender's block themselves (`workers.shard_send`):
        for each chunk of `plan`, `write(index)` returns once every rank's part is in the block, then the engines
        copy it. `plan` has `dtype` and `chunks` (per chunk, `(name, shape, byte offset)`) and was made for this sender's
        current block (`ShardedSend.propose` sizes it with `block_for`).

        With `defer_final` the engines are not asked to copy the final chunk: it stays in the block and comes back in
        `SendResult.deferred`, for the engines to install when they next generate. The caller must see it installed
        (or install it) before anything writes into the block again, i.e. before the next send."""
        version = self.check_next_version(version)
        start = time.perf_counter()
        checksums: Optional[dict[str, float]] = {} if self.compute_checksums else None
        num_bytes = num_tensors = 0
        self._final_acks = None
        deferred = None
        for index, placed in enumerate(plan.chunks):
            write(index)
            names, shapes = [name for name, _, _ in placed], [tuple(shape) for _, shape, _ in placed]
            nbytes = plan.chunk_bytes(index)
            if checksums is not None:
                raw = torch.frombuffer(self.block.buf, dtype=torch.uint8, count=nbytes)
                tensors = unpack(raw.view(dtype_from_name(plan.dtype)), names, shapes)
                checksums.update((name, tensor_checksum(tensor)) for name, tensor in tensors)
                del raw, tensors
            chunk = WeightChunk(version, index, index == len(plan.chunks) - 1, names, shapes, plan.dtype)
            chunk.payload = {"shm_name": self.block.name, "nbytes": nbytes}
            if chunk.final and defer_final:
                deferred = chunk
            else:
                self.wait_engines(self.notify_engines(chunk), chunk)
            num_bytes += nbytes
            num_tensors += len(names)
        self.last_version = version
        seconds = time.perf_counter() - start
        return SendResult(
            version, num_tensors, num_bytes, len(plan.chunks), seconds, checksums, self._final_acks, writers, deferred
        )

    def block_for(self, nbytes: int) -> shared_memory.SharedMemory:
        """The sender's block, replaced by a bigger one when it holds fewer than `nbytes` bytes."""
        if self.block is not None and self.block.size < nbytes:
            self._release()
        if self.block is None:
            self.block = create_block(nbytes)
        return self.block

    def _release(self) -> None:
        block, self.block = self.block, None
        if block is not None:
            block.close()
            block.unlink()

    def close(self) -> None:
        """Unlink the block (engines still mapping it keep their mapping until they drop it)."""
        self._release()


class SharedMemoryReceiver(WeightReceiver):
    """Maps the sender's block (kept mapped while the sender keeps it) and copies each chunk into the engine's model."""

    def __init__(self, init_info: dict[str, Any], engine: Any) -> None:
        super().__init__(init_info, engine)
        self.mapped = MappedBlock()

    async def receive(self, chunk: WeightChunk) -> int:
        """Install tensors viewed straight from the block: the engine copies them (`update_weights` keeps no view),
        so the sender may overwrite the block with the next chunk once this returns."""
        block = self.mapped.get(chunk.payload["shm_name"])
        raw = torch.frombuffer(block.buf, dtype=torch.uint8, count=chunk.payload["nbytes"])
        named = unpack(raw.view(dtype_from_name(chunk.dtype)), chunk.names, chunk.shapes)
        del raw
        return await self.install(chunk, named)

    def close(self) -> None:
        """Unmap the block."""
        self.mapped.close()


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
