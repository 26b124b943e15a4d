"""The two halves of a weight sync: `WeightSender` (in the process holding the trained weights) and
`WeightReceiver` (inside each engine actor), plus the messages and results they exchange.

A sync sends every tensor once, cast to the engines' dtype, in byte-bounded chunks. For each chunk the sender sends
its metadata (a `WeightChunk`) to every engine through Ray, moves the payload by its own transport (a process group,
shared memory, files, CUDA IPC), and waits until every engine installed the chunk. The last chunk of a sync carries
`final=True`; installing it makes the engines serve the new version. Each engine acknowledges a chunk with the version
it serves afterwards; the acknowledgements of the final chunk travel back in `SendResult.served_versions`, so the
driver can confirm the sync without asking the engines again.

A transport whose payload stays readable after the send (`shm`: the sender's block) may leave the final chunk to be
installed later (`SendResult.deferred`): the driver then hands it to the engines' proxies, which send it along with
their next generate call, so the sync costs no notify/acknowledge round trip (see `WeightSyncStrategy.defer_install`).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

import ray
import torch

from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.weight_sync.chunks import NamedTensors, cast_tensors, dtype_from_name, dtype_name, plan_chunks

__all__ = [
    "SendResult",
    "VerifyReport",
    "WeightChunk",
    "WeightReceiver",
    "WeightSender",
    "WeightSyncError",
    "WeightTarget",
]
"""The transport-level types every strategy is built from (`skyrl_train.weight_sync` re-exports them)."""

DEFAULT_CHUNK_BYTES = 128 * 1024 * 1024
DEFAULT_TIMEOUT_S = 300.0


class WeightSyncError(RuntimeError):
    """A sync failed, an engine serves another version than the one sent, or verify found mismatching weights."""


@dataclass
class WeightChunk:
    """Metadata of one chunk, sent to every engine through Ray; `payload` holds the transport's own fields."""

    version: int
    index: int
    final: bool
    names: list[str]
    shapes: list[tuple[int, ...]]
    dtype: str
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def numel(self) -> int:
        """Elements in the chunk's flat buffer."""
        total = 0
        for shape in self.shapes:
            count = 1
            for dim in shape:
                count *= dim
            total += count
        return total


@dataclass
class SendResult:
    """What one `WeightSender.send` did; `checksums` (of the tensors as the engines hold them) when enabled."""

    version: int
    num_tensors: int
    num_bytes: int
    num_chunks: int
    seconds: float
    checksums: Optional[dict[str, float]] = None
    served_versions: Optional[list[int]] = None
    """The version each engine (in the sender's `engine_handles` order) acknowledged the final chunk with: what it
    serves after the sync. None when the sender did not collect the acknowledgements (`wait_engines`)."""
    writers: int = 1
    """Processes that wrote the payload: 1 when the sender packed gathered tensors, the policy's rank count when
    each rank wrote its own shard (`workers.shard_send`)."""

    deferred: Optional[WeightChunk] = None
    """The final chunk when the sender left its installation to the engines' next generate call (no engine has
    installed it yet; its payload stays in the transport until the next send), else None."""

    def report(self) -> dict[str, Any]:
        """What the trainer reads of a send (plain data for Ray): `version`, `num_bytes`, `seconds`, `checksums`,
        `served_versions`, `writers`, `deferred`."""
        return {
            "version": self.version,
            "num_bytes": self.num_bytes,
            "seconds": self.seconds,
            "checksums": self.checksums,
            "served_versions": self.served_versions,
            "writers": self.writers,
            "deferred": self.deferred,
        }

    @property
    def megabytes_per_second(self) -> float:
        """Throughput of the sync in MB/s (10^6 bytes)."""
        return self.num_bytes / 1e6 / max(self.seconds, 1e-9)


@dataclass
class VerifyReport:
    """Outcome of `WeightSyncStrategy.verify`: how many parameters matched on every engine.

    `unreported` names sent parameters no engine reports a checksum for (e.g. a tied `lm_head.weight`, which the
    engine counts once under the embedding's name).
    """

    num_engines: int
    num_checked: int
    unreported: list[str] = field(default_factory=list)
    mismatches: dict[int, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no engine differs from the sender."""
        return not self.mismatches


class WeightTarget(Protocol):
    """What a `WeightReceiver` installs into: the weight half of `skyrl_train.inference.InferenceEngine`.

    Declared here so that weight sync depends on no engine code (the engines' actors build receivers, not the other
    way round); every `InferenceEngine` satisfies it.
    """

    @property
    def weight_version(self) -> int:
        """The version of the weights being served."""

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Install new weights (all or a subset, by parameter name) and serve them as `version`."""


class WeightSender(abc.ABC):
    """Sends named tensors to the engines; built by `make_sender(strategy_name, init_info)` in the sending process.

    `init_info` keys used here: `dtype` (engine dtype name), `chunk_bytes`, `engine_handles` (Ray actor handles of
    the engines), `timeout_s`, `compute_checksums`, `start_version` (the version the engines serve now).
    """

    transport_device: str = "cpu"
    """Device the cast tensors are placed on before they are moved."""

    def __init__(self, init_info: dict[str, Any]) -> None:
        self.init_info = init_info
        self.dtype = dtype_from_name(init_info["dtype"])
        self.chunk_bytes = int(init_info["chunk_bytes"])
        self.engine_handles = list(init_info["engine_handles"])
        self.timeout_s = float(init_info.get("timeout_s", DEFAULT_TIMEOUT_S))
        self.compute_checksums = bool(init_info.get("compute_checksums", False))
        self.last_version = int(init_info.get("start_version", 0))
        self._final_acks: Optional[list[int]] = None

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: Optional[int] = None) -> SendResult:
        """Send every tensor, cast to the engines' dtype, and make the engines serve `version` (default: last + 1)."""
        version = self.check_next_version(version)
        named = list(named_tensors)
        if not named:
            raise ValueError("send: named_tensors is empty; a sync must send at least one tensor")
        start = time.perf_counter()
        chunks = plan_chunks(named, self.chunk_bytes, self.dtype)
        checksums: Optional[dict[str, float]] = {} if self.compute_checksums else None
        num_bytes = 0
        self._final_acks = None
        for index, chunk in enumerate(chunks):
            tensors = cast_tensors(chunk, self.dtype, self.transport_device)
            if checksums is not None:
                checksums.update((name, tensor_checksum(tensor)) for name, tensor in tensors)
            num_bytes += sum(tensor.numel() * tensor.element_size() for _, tensor in tensors)
            meta = WeightChunk(
                version=version,
                index=index,
                final=index == len(chunks) - 1,
                names=[name for name, _ in tensors],
                shapes=[tuple(tensor.shape) for _, tensor in tensors],
                dtype=dtype_name(self.dtype),
            )
            self.send_chunk([tensor for _, tensor in tensors], meta)
        self.last_version = version
        seconds = time.perf_counter() - start
        return SendResult(version, len(named), num_bytes, len(chunks), seconds, checksums, self._final_acks)

    def check_next_version(self, version: Optional[int]) -> int:
        """The version a send makes the engines serve: `version`, which must exceed the last one (default: last + 1)."""
        version = self.last_version + 1 if version is None else int(version)
        if version <= self.last_version:
            raise ValueError(f"send: version must grow; got {version}, the engines already have {self.last_version}")
        return version

    @abc.abstractmethod
    def send_chunk(self, tensors: list[torch.Tensor], chunk: WeightChunk) -> None:
        """Move one chunk to every engine and return once all of them installed it."""

    def notify_engines(self, chunk: WeightChunk) -> list[ray.ObjectRef]:
        """Ask every engine to receive `chunk` (they then take part in the transport)."""
        return [handle.receive_weights.remote(chunk) for handle in self.engine_handles]

    def wait_engines(self, refs: list[ray.ObjectRef], chunk: WeightChunk) -> list[Any]:
        """Wait for every engine's acknowledgement (what `receive_weights` returned: the version it serves after
        installing `chunk`) and return them; those of the final chunk become the send's `served_versions` when every
        one is a version number. A failure names the engine, chunk and version."""
        acks = []
        for engine_index, ref in enumerate(refs):
            try:
                acks.append(ray.get(ref, timeout=self.timeout_s))
            except Exception as exc:
                raise WeightSyncError(
                    f"engine {engine_index} failed to install chunk {chunk.index} of version {chunk.version}: {exc}"
                ) from exc
        if chunk.final and all(isinstance(ack, int) for ack in acks):
            self._final_acks = list(acks)
        return acks

    def close(self) -> None:
        """Release the transport; the sender is unusable afterwards."""
        return None


class WeightReceiver(abc.ABC):
    """Receives chunks inside an engine actor and installs them with `engine.update_weights`.

    Built by `make_receiver(strategy_name, init_info, engine)`; `receive(chunk)` is called once per chunk.
    """

    def __init__(self, init_info: dict[str, Any], engine: WeightTarget) -> None:
        self.init_info = init_info
        self.engine = engine

    @abc.abstractmethod
    async def receive(self, chunk: WeightChunk) -> int:
        """Take one chunk from the transport, install it, and return the version the engine now serves."""

    def check_version(self, chunk: WeightChunk) -> int:
        """The version the engine serves now; an error when the first chunk of a sync does not bring a newer one."""
        current = self.engine.weight_version
        if chunk.index == 0 and chunk.version <= current:
            raise WeightSyncError(f"received version {chunk.version}, but the engine already serves version {current}")
        return current

    async def install(self, chunk: WeightChunk, named_tensors: NamedTensors) -> int:
        """Copy a chunk into the engine; only the final chunk switches the served version."""
        current = self.check_version(chunk)
        await self.engine.update_weights(named_tensors, chunk.version if chunk.final else current)
        return self.engine.weight_version

    def close(self) -> None:
        """Release the transport; the receiver is unusable afterwards."""
        return None
