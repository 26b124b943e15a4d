"""The files of the `delta` strategy: what a version looks like in the sync folder, and each engine's local copy.

A published version is a folder `<sync_dir>/delta-<version:08d>/` (a local path, a shared mount, or an fsspec URL
such as `gs://bucket/run`, `s3://bucket/run`) holding `payload-<k:05d>.bin` files and, written last, `manifest.json`.
The manifest lists every tensor of the version: its name, dtype, shape, byte size, the blake2b-128 checksum of its
bytes, and where its payload sits (`file`, `offset`, `length`). A payload is the zlib-compressed XOR of the tensor's
bytes with its bytes at `base_version` (`xor: true`), or the compressed bytes themselves in a full version
(`base_version: null`); a tensor whose bytes did not change has no payload. XOR deltas of trained weights are mostly
zero bytes (an update moves the low bits of most values and the high bits of few), which compress well.

Each engine keeps the version it serves as one safetensors file (`LocalCopy`): a full version rewrites it, a delta is
XORed into it in place and every patched tensor's checksum is verified, so a receiver never serves bytes other than
the sender's.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from fsspec.implementations.local import LocalFileSystem

from skyrl_train.utils.checkpoint_io import open_fs
from skyrl_train.weight_sync.base import WeightSyncError
from skyrl_train.weight_sync.chunks import NamedTensors, dtype_from_name

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
COMPRESSION = "zlib"
COMPRESSION_LEVEL = 1
"""zlib's fastest level: XOR deltas are mostly zero bytes, which every level squeezes about as well."""

_SAFETENSORS_DTYPES = {
    "bfloat16": "BF16",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}


def version_url(sync_dir: str, version: int) -> str:
    """The folder of `version` under `sync_dir`."""
    return f"{sync_dir.rstrip('/')}/delta-{version:08d}"


def tensor_bytes(tensor: torch.Tensor) -> np.ndarray:
    """The bytes of a contiguous CPU tensor as a flat uint8 array (a view, not a copy)."""
    return tensor.reshape(-1).view(torch.uint8).numpy()


def checksum(data: Any) -> str:
    """The blake2b-128 hex digest of a byte buffer."""
    return hashlib.blake2b(memoryview(data), digest_size=16).hexdigest()


def encode(current: np.ndarray, base: Optional[np.ndarray]) -> tuple[Optional[bytes], str]:
    """(payload, checksum of `current`): the compressed XOR with `base` (None when nothing changed), or without a
    base the compressed bytes themselves. Runs in worker threads: numpy, zlib and hashlib release the GIL."""
    digest = checksum(current)
    if base is None:
        return zlib.compress(memoryview(current), COMPRESSION_LEVEL), digest
    patch = np.bitwise_xor(current, base)
    if not patch.any():
        return None, digest
    return zlib.compress(memoryview(patch), COMPRESSION_LEVEL), digest


def decode(payload: bytes, nbytes: int, name: str) -> np.ndarray:
    """The `nbytes` bytes a payload of tensor `name` holds; WeightSyncError if it is corrupt or of another size."""
    try:
        data = zlib.decompress(payload)
    except zlib.error as exc:
        raise WeightSyncError(f"delta payload of {name!r} does not decompress: {exc}") from exc
    if len(data) != nbytes:
        raise WeightSyncError(f"delta payload of {name!r} holds {len(data)} bytes, expected {nbytes}")
    return np.frombuffer(data, dtype=np.uint8)


@dataclass
class DeltaRecord:
    """One tensor of a version: what it is, its checksum at this version, and where its payload is."""

    name: str
    dtype: str
    shape: list[int]
    nbytes: int
    checksum: str
    xor: bool
    """The payload is an XOR against the tensor's bytes at `base_version` (else the bytes themselves)."""
    file: Optional[str] = None
    """Payload file in the version folder; None when the tensor did not change since `base_version`."""
    offset: int = 0
    length: int = 0


@dataclass
class DeltaManifest:
    """Every tensor of one published version; `base_version` None marks a full version."""

    version: int
    base_version: Optional[int]
    tensors: list[DeltaRecord]
    compression: str = COMPRESSION
    format: int = FORMAT_VERSION

    def to_json(self) -> bytes:
        """The manifest file's content."""
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> DeltaManifest:
        """Parse a manifest read from `where`; WeightSyncError naming it when it is not one this code writes."""
        try:
            raw = json.loads(data)
            manifest = cls(**{**raw, "tensors": [DeltaRecord(**record) for record in raw["tensors"]]})
        except (ValueError, TypeError, KeyError) as exc:
            raise WeightSyncError(f"{where} is not a delta manifest: {exc}") from exc
        if manifest.format != FORMAT_VERSION or manifest.compression != COMPRESSION:
            raise WeightSyncError(
                f"{where}: format {manifest.format} with {manifest.compression} compression; this version reads format"
                f" {FORMAT_VERSION} with {COMPRESSION}"
            )
        return manifest


def read_manifest(sync_dir: str, version: int) -> DeltaManifest:
    """The manifest of `version` under `sync_dir`; WeightSyncError naming the URL when it is missing."""
    url = f"{version_url(sync_dir, version)}/{MANIFEST_NAME}"
    fs, path = open_fs(url)
    try:
        data = fs.cat_file(path)
    except FileNotFoundError as exc:
        raise WeightSyncError(f"no delta manifest at {url}: was version {version} published there?") from exc
    return DeltaManifest.from_json(data, url)


class PayloadWriter:
    """Writes one version's folder: compressed payloads packed into files of at most `max_file_bytes` (a larger
    payload gets a file of its own), then the manifest. An existing folder of that version (left by an earlier run)
    is removed first. Files of a remote folder go through `staging_dir` when given (written there, then uploaded),
    else straight from memory."""

    def __init__(self, folder_url: str, max_file_bytes: int, staging_dir: Optional[str] = None) -> None:
        self.fs, self.root = open_fs(folder_url)
        self.max_file_bytes = max_file_bytes
        self.staging_dir = staging_dir
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)
        self.fs.makedirs(self.root, exist_ok=True)
        self._buffer = bytearray()
        self._index = 0
        self.bytes_written = 0

    def add(self, payload: bytes) -> tuple[str, int, int]:
        """Place `payload` in the current file; returns (file, offset, length)."""
        if self._buffer and len(self._buffer) + len(payload) > self.max_file_bytes:
            self._flush()
        offset = len(self._buffer)
        self._buffer += payload
        return f"payload-{self._index:05d}.bin", offset, len(payload)

    def finish(self, manifest: DeltaManifest) -> None:
        """Write the last payload file, then the manifest (its presence marks the version complete)."""
        self._flush()
        self._write(MANIFEST_NAME, manifest.to_json())

    def _flush(self) -> None:
        if self._buffer:
            self._write(f"payload-{self._index:05d}.bin", bytes(self._buffer))
            self.bytes_written += len(self._buffer)
            self._index += 1
            self._buffer = bytearray()

    def _write(self, name: str, data: bytes) -> None:
        path = f"{self.root}/{name}"
        if isinstance(self.fs, LocalFileSystem):  # readers see no half-written file: write aside, then rename
            partial = f"{path}.partial"
            with open(partial, "wb") as handle:
                handle.write(data)
            os.replace(partial, path)
        elif self.staging_dir is not None:
            os.makedirs(self.staging_dir, exist_ok=True)
            staged = os.path.join(self.staging_dir, name)
            with open(staged, "wb") as handle:
                handle.write(data)
            try:
                self.fs.put_file(staged, path)
            finally:
                os.unlink(staged)
        else:
            self.fs.pipe_file(path, data)


def _fetch_files(folder_url: str, names: Sequence[str], workers: int) -> Iterator[tuple[str, bytes]]:
    """(name, content) of each payload file of a version folder, `workers` downloads at a time."""
    fs, root = open_fs(folder_url)
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="skyrl-delta-fetch") as pool:
        for start in range(0, len(names), max(1, workers)):
            batch = names[start : start + max(1, workers)]
            yield from zip(batch, pool.map(lambda name: fs.cat_file(f"{root}/{name}"), batch))


class LocalCopy:
    """An engine's copy of the version it serves: `model.safetensors` in `directory` (emptied when made)."""

    FILE_NAME = "model.safetensors"

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        self.path = self.directory / self.FILE_NAME
        self.version: Optional[int] = None
        self.layout: dict[str, tuple[int, int, str, list[int]]] = {}
        """name -> (byte offset in the file, byte size, dtype name, shape), in file order."""

    def apply(self, sync_dir: str, manifest: DeltaManifest, download_workers: int) -> None:
        """Bring the copy from `manifest.base_version` to `manifest.version`, fetching the payload files. A failure
        leaves the copy empty (version None), so the next version is replayed from a full one."""
        folder = version_url(sync_dir, manifest.version)
        by_file: dict[str, list[DeltaRecord]] = {}
        for record in manifest.tensors:
            if record.file is not None:
                by_file.setdefault(record.file, []).append(record)
        payloads = _fetch_files(folder, sorted(by_file), download_workers)
        try:
            if manifest.base_version is None:
                self._rewrite(manifest, payloads, by_file)
            else:
                self._patch(manifest, payloads, by_file)
        except BaseException:
            self.version, self.layout = None, {}  # half-patched: the next version is rebuilt from a full one
            raise
        self.version = manifest.version

    def _rewrite(
        self, manifest: DeltaManifest, payloads: Iterator[tuple[str, bytes]], by_file: dict[str, list[DeltaRecord]]
    ) -> None:
        missing = [record.name for record in manifest.tensors if record.file is None or record.xor]
        if missing:
            raise WeightSyncError(f"full version {manifest.version} lacks the bytes of {missing[:5]}")
        header: dict[str, Any] = {}
        offset = 0
        for record in manifest.tensors:
            header[record.name] = {
                "dtype": _SAFETENSORS_DTYPES[record.dtype],
                "shape": record.shape,
                "data_offsets": [offset, offset + record.nbytes],
            }
            offset += record.nbytes
        encoded = json.dumps(header).encode()
        encoded += b" " * (-len(encoded) % 8)
        start = 8 + len(encoded)
        self.layout = {
            record.name: (start + header[record.name]["data_offsets"][0], record.nbytes, record.dtype, record.shape)
            for record in manifest.tensors
        }
        with open(self.path, "wb") as handle:
            handle.write(len(encoded).to_bytes(8, "little") + encoded)
            handle.truncate(start + offset)
        self._patch(manifest, payloads, by_file)

    def _patch(
        self, manifest: DeltaManifest, payloads: Iterator[tuple[str, bytes]], by_file: dict[str, list[DeltaRecord]]
    ) -> None:
        full = manifest.base_version is None
        if not full:
            if manifest.base_version != self.version:
                raise WeightSyncError(
                    f"delta version {manifest.version} applies to version {manifest.base_version}, but this engine's"
                    f" copy holds version {self.version}"
                )
            names = [record.name for record in manifest.tensors]
            if names != list(self.layout) or any(self.layout[r.name][1] != r.nbytes for r in manifest.tensors):
                raise WeightSyncError(f"delta version {manifest.version} holds other tensors than this engine's copy")
        with open(self.path, "r+b") as handle, mmap.mmap(handle.fileno(), 0) as mapped:
            for file_name, content in payloads:
                for record in by_file[file_name]:
                    offset, nbytes, _, _ = self.layout[record.name]
                    data = decode(content[record.offset : record.offset + record.length], nbytes, record.name)
                    if not _apply_one(mapped, offset, data, xor=not full, expected=record.checksum):
                        raise WeightSyncError(
                            f"tensor {record.name!r} of version {manifest.version} does not match the sender's"
                            " checksum after applying its payload"
                        )
            mapped.flush()

    def batches(self, batch_bytes: int) -> list[list[str]]:
        """The copy's tensor names in file order, grouped into batches of at most `batch_bytes` bytes (a larger
        tensor alone)."""
        groups: list[list[str]] = []
        size = 0
        for name, (_, nbytes, _, _) in self.layout.items():
            if groups and groups[-1] and size + nbytes <= batch_bytes:
                groups[-1].append(name)
                size += nbytes
            else:
                groups.append([name])
                size = nbytes
        return groups

    def read(self, names: Sequence[str], device: str) -> NamedTensors:
        """Tensors of the copy (fresh memory, on `device`)."""
        tensors = []
        with open(self.path, "rb") as handle:
            for name in names:
                offset, nbytes, dtype, shape = self.layout[name]
                handle.seek(offset)
                if nbytes == 0:
                    value = torch.empty(shape, dtype=dtype_from_name(dtype))
                else:
                    raw = torch.frombuffer(bytearray(handle.read(nbytes)), dtype=torch.uint8)
                    value = raw.view(dtype_from_name(dtype)).reshape(shape)
                tensors.append((name, value.to(device)))
        return tensors


def _apply_one(mapped: mmap.mmap, offset: int, data: np.ndarray, xor: bool, expected: str) -> bool:
    """Write (or XOR) `data` into the map at `offset`; whether the region then has the `expected` checksum. The view
    into the map is gone when this returns, so the map can close even after a failure."""
    region = np.ndarray((len(data),), dtype=np.uint8, buffer=mapped, offset=offset)
    if xor:
        np.bitwise_xor(region, data, out=region)
    else:
        region[:] = data
    return checksum(region) == expected
