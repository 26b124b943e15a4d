"""The `delta` strategy (SkyRL's delta weight sync): each new version goes through shared or cloud storage as
compressed XOR deltas against the previous one.

The sender keeps the bytes of the last version it published (in the engines' dtype, on CPU). A sync writes the new
version's folder under `sync_dir` (format: `delta_files`): per tensor the zlib-compressed XOR with the previous bytes,
nothing for an unchanged tensor, and for the first version of a run (or after the tensors changed shape) the
compressed bytes themselves. Then it tells every engine the version, through Ray, as one final chunk. Each engine's
receiver reads the manifest, replays any versions it missed from `sync_dir`, patches its local copy (a safetensors
file under `local_checkpoint_dir`), verifies every patched tensor's checksum, and installs the whole model from the
copy, so an engine also drops any change made to it out of band.

It moves less data than `checkpoint` (which writes whole versions) and needs nothing shared but storage both sides
reach: a local folder on one machine, an NFS mount, or a `gs://` / `s3://` bucket through fsspec (install gcsfs or
s3fs). Versions stay in `sync_dir` after the run (a folder the strategy created itself is removed at `close`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import numpy as np
import torch

from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.weight_sync.base import (
    SendResult,
    WeightChunk,
    WeightReceiver,
    WeightSender,
    WeightSyncError,
    WeightTarget,
)
from skyrl_train.weight_sync.chunks import cast_tensors, dtype_name, nbytes_as, plan_chunks
from skyrl_train.weight_sync.delta_files import (
    DeltaManifest,
    DeltaRecord,
    LocalCopy,
    PayloadWriter,
    encode,
    read_manifest,
    tensor_bytes,
    version_url,
)
from skyrl_train.weight_sync.strategy import WeightSyncStrategy, register_weight_sync_strategy

logger = logging.getLogger(__name__)

GIB = 1024**3


class DeltaSender(WeightSender):
    """Publishes each version under `sync_dir`, then has the engines install it (see the module docstring)."""

    def __init__(self, init_info: dict[str, Any]) -> None:
        super().__init__(init_info)
        self.sync_dir = str(init_info["sync_dir"])
        self.staging_dir: Optional[str] = init_info.get("publish_staging_dir")
        self.max_file_bytes = int(init_info["max_file_bytes"])
        self.workers = int(init_info["publish_workers"])
        self._base: Optional[dict[str, np.ndarray]] = None
        """The bytes of the last published version, by tensor name."""
        self._base_layout: Optional[list[tuple[str, int]]] = None
        self._base_version: Optional[int] = None
        self.last_publish: dict[str, float] = {}
        """What the last sync wrote: `tensors`, `changed_tensors`, `bytes` (uncompressed), `payload_bytes`."""

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: Optional[int] = None) -> SendResult:
        """Publish `named_tensors` as `version` (default: last + 1) and wait until every engine serves it."""
        version = self.check_next_version(version)
        start = time.perf_counter()
        manifest, checksums, num_chunks = self.publish(named_tensors, version)
        meta = WeightChunk(
            version=version,
            index=0,
            final=True,
            names=[record.name for record in manifest.tensors],
            shapes=[tuple(record.shape) for record in manifest.tensors],
            dtype=dtype_name(self.dtype),
            payload={"sync_dir": self.sync_dir},
        )
        self._final_acks = None
        self.wait_engines(self.notify_engines(meta), meta)
        self.last_version = version
        seconds = time.perf_counter() - start
        total = int(self.last_publish["bytes"])
        return SendResult(version, len(manifest.tensors), total, num_chunks, seconds, checksums, self._final_acks)

    def publish(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int
    ) -> tuple[DeltaManifest, Optional[dict[str, float]], int]:
        """Write `version`'s folder under `sync_dir` (no engine is told): a delta on the last published version
        when the tensors (names, order, sizes) are the same, else a full version. Returns the manifest, the tensors'
        checksums (with `compute_checksums`) and the number of cast chunks."""
        named = list(named_tensors)
        if not named:
            raise ValueError("send: named_tensors is empty; a sync must send at least one tensor")
        layout = [(name, nbytes_as(tensor, self.dtype)) for name, tensor in named]
        base = self._base if self._base_layout == layout else None
        base_version = None if base is None else self._base_version
        self._base = None  # until this version is whole: a failure makes the next version a full one
        snapshot: dict[str, np.ndarray] = {}
        checksums: Optional[dict[str, float]] = {} if self.compute_checksums else None
        writer = PayloadWriter(version_url(self.sync_dir, version), self.max_file_bytes, self.staging_dir)
        records: list[DeltaRecord] = []
        chunks = plan_chunks(named, self.chunk_bytes, self.dtype)
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="skyrl-delta-publish") as pool:
            for chunk in chunks:
                tensors = cast_tensors(chunk, self.dtype, "cpu")
                if checksums is not None:
                    checksums.update((name, tensor_checksum(tensor)) for name, tensor in tensors)
                arrays = [(name, tensor, tensor_bytes(tensor)) for name, tensor in tensors]
                encoded = pool.map(lambda item: encode(item[2], None if base is None else base[item[0]]), arrays)
                for (name, tensor, data), (payload, digest) in zip(arrays, encoded):
                    record = DeltaRecord(
                        name, dtype_name(tensor.dtype), list(tensor.shape), data.nbytes, digest, xor=base is not None
                    )
                    if payload is not None:
                        record.file, record.offset, record.length = writer.add(payload)
                    records.append(record)
                    if base is None:
                        snapshot[name] = data.copy()
                    else:
                        base[name][:] = data
        manifest = DeltaManifest(version, base_version, records)
        writer.finish(manifest)
        self._base, self._base_layout, self._base_version = (snapshot if base is None else base), layout, version
        total = sum(record.nbytes for record in records)
        self.last_publish = {
            "tensors": float(len(records)),
            "changed_tensors": float(sum(record.file is not None for record in records)),
            "bytes": float(total),
            "payload_bytes": float(writer.bytes_written),
        }
        logger.info(
            "delta weight sync: version %d (%s) wrote %.1f MB for %.1f MB of weights",
            version,
            "full" if base_version is None else f"delta on {base_version}",
            writer.bytes_written / 1e6,
            total / 1e6,
        )
        return manifest, checksums, len(chunks)

    def send_chunk(self, tensors: list[torch.Tensor], chunk: WeightChunk) -> None:
        """Not used: a delta sync publishes whole versions (`send`)."""
        raise NotImplementedError("the delta sender publishes whole versions; call send()")

    def close(self) -> None:
        """Drop the kept bytes of the last version."""
        self._base = self._base_layout = None


class DeltaReceiver(WeightReceiver):
    """Brings the engine's local copy to each announced version and installs it from there."""

    def __init__(self, init_info: dict[str, Any], engine: WeightTarget) -> None:
        super().__init__(init_info, engine)
        self.sync_dir = str(init_info["sync_dir"])
        self.download_workers = int(init_info["download_workers"])
        self.batch_bytes = int(init_info["chunk_bytes"])
        local = init_info.get("local_dir")
        self._owned_dir = None if local else tempfile.mkdtemp(prefix="skyrl_delta_engine_")
        self.copy = LocalCopy(local or self._owned_dir)

    async def receive(self, chunk: WeightChunk) -> int:
        """Catch the local copy up to `chunk.version` and install every tensor of it, in batches of `chunk_bytes`."""
        current = self.check_version(chunk)
        await asyncio.to_thread(self._catch_up, chunk.version)
        device = self.init_info["device"]
        batches = self.copy.batches(self.batch_bytes)
        for index, names in enumerate(batches):
            tensors = await asyncio.to_thread(self.copy.read, names, device)
            await self.engine.update_weights(tensors, chunk.version if index == len(batches) - 1 else current)
        return self.engine.weight_version

    def _catch_up(self, version: int) -> None:
        """Apply the versions between the copy's and `version`, reading their manifests back from `version` to a
        full one or to the copy's own."""
        chain: list[DeltaManifest] = []
        wanted = version
        while True:
            manifest = read_manifest(self.sync_dir, wanted)
            chain.append(manifest)
            base = manifest.base_version
            if base is None or base == self.copy.version:
                break
            if base >= wanted or (self.copy.version is not None and base < self.copy.version):
                raise WeightSyncError(
                    f"version {wanted} in {self.sync_dir} is a delta on version {base}, which cannot follow this"
                    f" engine's copy (version {self.copy.version})"
                )
            wanted = base
        for manifest in reversed(chain):
            self.copy.apply(self.sync_dir, manifest, self.download_workers)

    def close(self) -> None:
        """Remove the local copy when this receiver made its folder."""
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)


@register_weight_sync_strategy("delta", builtin=True)
class DeltaStrategy(WeightSyncStrategy):
    """Weights as compressed XOR deltas through `sync_dir` (see the module docstring).

    Args beyond the base class's:
        sync_dir: folder or fsspec URL both sides reach; None: a temporary folder on this machine (removed by
            `close`), for runs on one machine.
        local_checkpoint_dir: where each engine keeps its copy (`<dir>/engine-<i>`, emptied at start); None: a
            temporary folder per engine.
        publish_staging_dir: a local folder the sender writes files of a remote `sync_dir` into before uploading
            them; None: uploaded from memory.
        max_file_bytes: largest payload file (a larger single payload gets a file of its own).
        download_workers: payload files an engine downloads at once.
        publish_workers: threads computing and compressing the deltas; None: min(8, CPUs).
    """

    sender_cls = DeltaSender
    receiver_cls = DeltaReceiver

    def __init__(
        self,
        *args: Any,
        sync_dir: Optional[str] = None,
        local_checkpoint_dir: Optional[str] = None,
        publish_staging_dir: Optional[str] = None,
        max_file_bytes: int = GIB,
        download_workers: int = 4,
        publish_workers: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        for label, value in (("max_file_bytes", max_file_bytes), ("download_workers", download_workers)):
            if value < 1:
                raise ValueError(f"{label} must be >= 1, got {value}")
        if publish_workers is not None and publish_workers < 1:
            raise ValueError(f"publish_workers must be >= 1 or None, got {publish_workers}")
        self.sync_dir = sync_dir
        self.local_checkpoint_dir = local_checkpoint_dir
        self.publish_staging_dir = publish_staging_dir
        self.max_file_bytes = max_file_bytes
        self.download_workers = download_workers
        self.publish_workers = publish_workers or min(8, os.cpu_count() or 1)
        self._owned_sync_dir: Optional[str] = None

    @classmethod
    def options_from_config(cls, cfg: Any) -> dict[str, Any]:
        """The options `generator.inference_engine.delta_weight_sync` sets."""
        delta = cfg.generator.inference_engine.delta_weight_sync
        return {
            "sync_dir": delta.sync_dir,
            "local_checkpoint_dir": delta.local_checkpoint_dir,
            "publish_staging_dir": delta.publish_staging_dir or None,
            "max_file_bytes": max(1, int(delta.max_file_size_in_gb * GIB)),
            "download_workers": delta.cloud_download_workers,
            "publish_workers": delta.publish_num_workers,
        }

    def build_init_infos(
        self, common: dict[str, Any], engine_infos: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The sync folder (made here when none was given) for both sides, a local copy folder per engine."""
        if self.sync_dir is None:
            self._owned_sync_dir = self.sync_dir = tempfile.mkdtemp(prefix="skyrl_delta_sync_")
        sync_dir = self.sync_dir if "://" in self.sync_dir else os.path.abspath(os.path.expanduser(self.sync_dir))
        sender = {
            **common,
            "sync_dir": sync_dir,
            "publish_staging_dir": self.publish_staging_dir,
            "max_file_bytes": self.max_file_bytes,
            "publish_workers": self.publish_workers,
        }
        receivers = [
            {
                **common,
                "sync_dir": sync_dir,
                "download_workers": self.download_workers,
                "local_dir": (
                    None
                    if self.local_checkpoint_dir is None
                    else os.path.join(os.path.expanduser(self.local_checkpoint_dir), f"engine-{index}")
                ),
            }
            for index in range(len(engine_infos))
        ]
        return sender, receivers

    async def close(self) -> None:
        """Release both sides and remove a sync folder this strategy created."""
        await super().close()
        if self._owned_sync_dir is not None:
            shutil.rmtree(self._owned_sync_dir, ignore_errors=True)
            self._owned_sync_dir = self.sync_dir = None
