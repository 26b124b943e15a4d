"""Check a checkpoint folder in torch.distributed.checkpoint's default (pickled) format before a loader unpickles it.

FSDP2 checkpoints hold no pickle at all (`workers/strategy/sharded_checkpoint.py`). Megatron's `dist_checkpointing`
(its `torch_dist` backend) writes DCP's default format, in which three kinds of data are pickles: `.metadata` (DCP
reads it with `pickle.load`), the byte entries inside the `*.distcp` data files (Megatron's ShardedObjects and other
non-tensor values: DCP's planner reads them with `torch.load(weights_only=False)`) and the `*.pt` files
(`common.pt`, read with `torch.load`). Unpickling runs whatever callables the pickle names, so a crafted file runs
code on every rank that loads it.

`check_pickled_checkpoint(folder)` reads each of them first through an unpickler that resolves only an allowlist of
plain data classes: DCP's metadata dataclasses, `torch.Size` and the dtypes for `.metadata`, torch's own
weights-only unpickler for the byte entries and `*.pt` files. A file that names any other global is refused
(`UnsafeCheckpointError`) before the real loader runs, so when that loader then unpickles the same bytes it can only
build those plain objects. The tensor entries of `*.distcp` files need no check: DCP reads them with
`torch.load(weights_only=True)` itself.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any, Union

import torch

_METADATA_GLOBALS = frozenset(
    [
        ("torch.distributed.checkpoint.metadata", name)
        for name in (
            "Metadata",
            "MetadataIndex",
            "StorageMeta",
            "TensorProperties",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "_MEM_FORMAT_ENCODING",
        )
    ]
    + [
        ("torch.distributed.checkpoint.planner", name)
        for name in ("SavePlan", "WriteItem", "WriteItemType", "TensorWriteData")
    ]
    + [
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch.serialization", "_get_layout"),  # a layout by its name, from a fixed table
        ("torch", "Size"),
        ("collections", "OrderedDict"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),
    ]
)
"""The globals a DCP `.metadata` file may name (the ones torch's and Megatron's writers use): data classes, enums and
lookups whose construction runs no code of the file's choosing."""

METADATA_FILE = ".metadata"


class UnsafeCheckpointError(ValueError):
    """A checkpoint file would run code (or cannot be checked) when unpickled; nothing in it was loaded."""


class _MetadataUnpickler(pickle.Unpickler):
    """Resolves only `_METADATA_GLOBALS` and torch's dtypes, layouts and memory formats; refuses any other global."""

    def __init__(self, file: Any, where: str) -> None:
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _METADATA_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(
            getattr(torch, name, None), (torch.dtype, torch.layout, torch.memory_format)
        ):
            return getattr(torch, name)
        raise UnsafeCheckpointError(
            f"{self.where} names {module}.{name}, which is not one of the plain classes a torch.distributed.checkpoint "
            "metadata file holds: refused before unpickling (it could run code)"
        )


def read_metadata(path: Union[str, os.PathLike[str]]) -> Any:
    """A DCP `.metadata` file's `Metadata`, unpickled through the allowlist; `UnsafeCheckpointError` otherwise."""
    with open(path, "rb") as handle:
        try:
            return _MetadataUnpickler(handle, str(path)).load()
        except UnsafeCheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - a truncated or garbled pickle: not loadable either way
            raise UnsafeCheckpointError(f"{path} is not a readable metadata file: {type(exc).__name__}: {exc}") from exc


def _check_weights_only(data: bytes, where: str) -> None:
    try:
        torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch reports a refused global as UnpicklingError, garbage otherwise
        raise UnsafeCheckpointError(
            f"{where} does not load with torch's weights-only unpickler, so it may run code when the checkpoint "
            f"loader unpickles it: refused ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from exc


def check_pickled_checkpoint(folder: Union[str, os.PathLike[str]], where: Any = None) -> None:
    """Raise `UnsafeCheckpointError` unless every pickle in the DCP-format checkpoint `folder` (its `.metadata`,
    the byte entries of its data files, its `*.pt` files) holds only plain data; read nothing else."""
    folder = Path(folder)
    where = where if where is not None else folder
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and entry.name.endswith(".pt"):
            _check_weights_only(entry.read_bytes(), f"{where}/{entry.name}")
    metadata_path = folder / METADATA_FILE
    if not metadata_path.is_file():
        return
    metadata = read_metadata(metadata_path)
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, MetadataIndex

    if not isinstance(metadata, Metadata):
        raise UnsafeCheckpointError(f"{where}/{METADATA_FILE} holds a {type(metadata).__name__}, not a Metadata")
    storage = metadata.storage_data or {}
    for key, entry in metadata.state_dict_metadata.items():
        if not isinstance(entry, BytesStorageMetadata):
            continue
        info = storage.get(MetadataIndex(key))
        relative = getattr(info, "relative_path", None)
        if not isinstance(relative, str) or os.path.basename(relative) != relative or relative in ("", ".", ".."):
            raise UnsafeCheckpointError(f"{where}: the byte entry {key!r} names no data file of the folder")
        if getattr(info, "transform_descriptors", None):
            raise UnsafeCheckpointError(f"{where}: the byte entry {key!r} is stored transformed and cannot be checked")
        with open(folder / relative, "rb") as handle:
            handle.seek(int(info.offset))
            data = handle.read(int(info.length))
        _check_weights_only(data, f"{where}/{relative} (entry {key!r})")
