"""Sharded model and optimizer state on disk in formats that cannot run code: safetensors shards plus JSON values.

torch.distributed.checkpoint's default format pickles: its reader loads `.metadata` with `pickle.load`, and its
planner loads every non-tensor entry with `torch.load(weights_only=False)`, so a crafted checkpoint (local, or
fetched from an fsspec URL) runs code on every rank that resumes from it. Here the tensors go through DCP's
safetensors storage instead (`HuggingFaceStorageWriter(save_distributed=True)`): each rank writes its own chunks into
one safetensors file whose JSON header records each chunk's offsets in the full tensor, and
`HuggingFaceStorageReader` rebuilds the checkpoint's layout from those headers alone, so loading still reshards. The
non-tensor leaves of the state (an optimizer's hyperparameters and the parameter names of its groups), and which
entries are views of another (tied weights: safetensors stores each memory once), come back as JSON-ready values for
the caller's own JSON file. Loading reads nothing else, and refuses a folder that holds DCP's pickled files
(`PICKLED_DCP_FILES`) instead of reading it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Union

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter

from skyrl_train.utils.plain_values import to_jsonable

PICKLED_DCP_FILES = (".metadata", ".distcp")
"""Name endings of the files torch.distributed.checkpoint's default format pickles: `.metadata` (also a rank's own
`__<rank>.metadata`) and the `__<rank>_<n>.distcp` data files."""

SHARD_SUFFIX = ".safetensors"

_Path = tuple[Union[str, int], ...]


class PickledCheckpointError(ValueError):
    """A checkpoint folder holds files of a pickled format; they are never read (unpickling them could run code)."""


def _leaves(value: Any, path: _Path = ()) -> Iterator[tuple[_Path, Any]]:
    """Every leaf of a nested state with its path: mappings are walked, and so are lists and tuples that hold a
    tensor or a mapping; any other value (a number, a string, a tuple of numbers, a list of names) is a leaf."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, (list, tuple)) and any(isinstance(item, (Mapping, torch.Tensor)) for item in value):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path, value


def split_state(state: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, _Path]]:
    """The tensors of a nested state (DTensors included) and its other leaves, each under its dotted path, plus the
    path of each non-tensor leaf."""
    tensors: dict[str, torch.Tensor] = {}
    values: dict[str, Any] = {}
    paths: dict[str, _Path] = {}
    for path, leaf in _leaves(state):
        key = ".".join(str(part) for part in path)
        if key in tensors or key in values:
            raise ValueError(f"two entries of the state have the same dotted name {key!r}")
        if isinstance(leaf, torch.Tensor):
            tensors[key] = leaf
        else:
            values[key], paths[key] = leaf, path
    return tensors, values, paths


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _aliases(tensors: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """Entry -> the first entry whose (local) tensor is the same view of the same memory (tied weights)."""
    first: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for key, tensor in tensors.items():
        local = _local(tensor)
        if local.numel() == 0:
            continue
        view = (local.untyped_storage().data_ptr(), local.storage_offset(), tuple(local.shape), local.stride())
        if view in first:
            aliases[key] = first[view]
        else:
            first[view] = key
    return aliases


def save_sharded_state(state: Mapping[str, Any], directory: Union[str, os.PathLike[str]]) -> dict[str, Any]:
    """Write this rank's share of the tensors of `state` into `directory` as safetensors (every rank must call
    this); return the other leaves and the tied entries as JSON-ready values for the caller to store and hand back
    to `load_sharded_state`."""
    tensors, values, _ = split_state(state)
    aliases = _aliases(tensors)
    stored = {key: tensor for key, tensor in tensors.items() if key not in aliases}
    dcp.save(stored, storage_writer=HuggingFaceStorageWriter(str(directory), save_distributed=True))
    return {"values": to_jsonable(values, "checkpoint state"), "aliases": aliases}


def refuse_pickled_checkpoint(directory: Union[str, os.PathLike[str]], where: Any) -> None:
    """Raise `PickledCheckpointError` when `directory` holds a file of torch.distributed.checkpoint's pickled
    format (a checkpoint written before this format, or a planted file), before anything in it is read."""
    pickled = sorted(name for name in os.listdir(directory) if name.endswith(PICKLED_DCP_FILES))
    if pickled:
        raise PickledCheckpointError(
            f"{where} holds {pickled}: files of torch.distributed.checkpoint's pickled format, which are never loaded "
            "because unpickling a file from a checkpoint can run arbitrary code. Checkpoints written by this version "
            f"hold *{SHARD_SUFFIX} shards and JSON only; resume from one of those"
        )


def _like(current: Any, saved: Any) -> Any:
    """A JSON value back in the container type of the value it replaces (JSON has no tuples)."""
    if isinstance(current, tuple) and isinstance(saved, list):
        if len(current) == len(saved):
            return tuple(_like(old, new) for old, new in zip(current, saved))
        return tuple(saved)
    return saved


def _set(state: Any, path: _Path, value: Any) -> None:
    for part in path[:-1]:
        state = state[part]
    state[path[-1]] = value


def load_sharded_state(
    state: dict[str, Any], directory: Union[str, os.PathLike[str]], saved: Mapping[str, Any], where: Any
) -> None:
    """Fill `state` (as built for saving: same keys) in place from what `save_sharded_state` wrote into `directory`
    and the `saved` values it returned. Every rank must call this. Only safetensors headers and data are read."""
    refuse_pickled_checkpoint(directory, where)
    if not any(name.endswith(SHARD_SUFFIX) for name in os.listdir(directory)):
        raise FileNotFoundError(f"{where} holds no *{SHARD_SUFFIX} shards: not a sharded checkpoint of this version")
    tensors, current, paths = split_state(state)
    values, aliases = saved.get("values", {}), saved.get("aliases", {})
    missing = sorted(set(current) - set(values)) + sorted(set(aliases) - set(tensors))
    if missing:
        raise ValueError(f"{where}: the checkpoint does not match this model: {missing[:5]} (another setup wrote it)")
    dcp.load(
        {key: tensor for key, tensor in tensors.items() if key not in aliases},
        storage_reader=HuggingFaceStorageReader(str(Path(directory))),
    )
    for key, source in aliases.items():
        target, origin = _local(tensors[key]), _local(tensors[source])
        if target.data_ptr() != origin.data_ptr():  # not tied in this model: copy what the checkpoint stored once
            target.copy_(origin)
    for key, path in paths.items():
        _set(state, path, _like(current[key], values[key]))
