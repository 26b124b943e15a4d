"""The `checkpoint` strategy: chunks written as safetensors files to a directory every engine can read.

The slowest transport, but it needs nothing shared except a filesystem (a local disk when everything runs on one
machine, a shared mount across machines). Each chunk is written to a temporary name and renamed, the engines load
it, and the file is deleted once every engine acknowledged.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors.torch import load_file, save_file

from skyrl_train.weight_sync.base import WeightChunk, WeightReceiver, WeightSender
from skyrl_train.weight_sync.strategy import WeightSyncStrategy, register_weight_sync_strategy


class CheckpointSender(WeightSender):
    """Writes each chunk to `<directory>/v<version>-c<index>.safetensors`."""

    def __init__(self, init_info: dict[str, Any]) -> None:
        super().__init__(init_info)
        self.directory = Path(init_info["directory"])
        self.directory.mkdir(parents=True, exist_ok=True)

    def send_chunk(self, tensors: list[torch.Tensor], chunk: WeightChunk) -> None:
        """Write the chunk's file atomically, let the engines load it, delete it."""
        path = self.directory / f"v{chunk.version:08d}-c{chunk.index:05d}.safetensors"
        partial = path.with_suffix(".partial")
        seen: set[int] = set()
        contents = {}
        for name, tensor in zip(chunk.names, tensors):
            pointer = tensor.untyped_storage().data_ptr()
            contents[name] = tensor.clone() if pointer in seen else tensor  # safetensors refuses shared storage
            seen.add(pointer)
        try:
            save_file(contents, str(partial))
            os.replace(partial, path)
            chunk.payload = {"path": str(path)}
            self.wait_engines(self.notify_engines(chunk), chunk)
        finally:
            partial.unlink(missing_ok=True)
            path.unlink(missing_ok=True)


class CheckpointReceiver(WeightReceiver):
    """Loads each chunk's file and installs it."""

    async def receive(self, chunk: WeightChunk) -> int:
        """Read the file (in a thread) and install the tensors in send order."""
        loaded = await asyncio.to_thread(load_file, chunk.payload["path"], device=self.init_info["device"])
        return await self.install(chunk, [(name, loaded[name]) for name in chunk.names])


@register_weight_sync_strategy("checkpoint", builtin=True)
class CheckpointStrategy(WeightSyncStrategy):
    """Weights through safetensors files in `directory` (default: a temporary directory removed by `close`)."""

    sender_cls = CheckpointSender
    receiver_cls = CheckpointReceiver

    def __init__(self, *args: Any, directory: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.directory = directory
        self._owned_directory: Optional[str] = None

    def build_init_infos(
        self, common: dict[str, Any], engine_infos: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Point both sides at the directory (made here when none was given)."""
        if self.directory is None:
            self._owned_directory = self.directory = tempfile.mkdtemp(prefix="skyrl_weight_sync_")
        info = {**common, "directory": os.path.abspath(os.path.expanduser(self.directory))}
        return info, [dict(info) for _ in engine_infos]

    async def close(self) -> None:
        """Release both sides and remove a directory this strategy created."""
        await super().close()
        if self._owned_directory is not None:
            shutil.rmtree(self._owned_directory, ignore_errors=True)
            self._owned_directory = self.directory = None
