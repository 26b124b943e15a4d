"""`WeightSyncStrategy`, the driver-side coordinator of weight sync, and the registry of strategies by name.

A strategy wires one sender to N engine actors. `init(sender, engines)` asks the engines for their dtype, device and
node, builds each side's `init_info`, and creates the receivers (in the engines) and the sender together, since some
transports (a process group) rendezvous at creation. The sender lives either in this process (`sender=None`; then
`sync(named_tensors)` sends) or in a Ray actor that mixes in `WeightSenderHost` (typically policy rank 0; the actor
then calls `self.weight_sender.send(...)` itself and the driver calls `confirm(version, served_versions)` with what
the send reported: the engines' acknowledgements already carry the versions they serve). `verify` compares the
engines' weight checksums with the sender's.

    strategy = make_weight_sync_strategy("broadcast", compute_checksums=True)
    await strategy.init(sender=None, engines=proxies)
    result = await strategy.sync(model.named_parameters())
    await strategy.verify(result.checksums)
"""

from __future__ import annotations

import abc
import asyncio
import math
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Optional, TypeVar

import ray
import torch

from skyrl_train.utils.registry import Registry
from skyrl_train.weight_sync.base import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_TIMEOUT_S,
    SendResult,
    VerifyReport,
    WeightChunk,
    WeightReceiver,
    WeightSender,
    WeightSyncError,
    WeightTarget,
)
from skyrl_train.weight_sync.locations import Location, this_location

__all__ = [
    "WEIGHT_SYNC_STRATEGIES",
    "WeightSenderHost",
    "WeightSyncStrategy",
    "make_receiver",
    "make_sender",
    "make_weight_sync_strategy",
    "register_weight_sync_strategy",
    "resolve_strategy_name",
]
"""The public names of this module (`skyrl_train.weight_sync` re-exports them)."""

S = TypeVar("S", bound=type)

WEIGHT_SYNC_STRATEGIES = Registry("weight sync strategy", '@register_weight_sync_strategy("name")')
"""Strategy name -> `WeightSyncStrategy` subclass."""

CHECKSUM_REL_TOL = 1e-9
"""Relative tolerance of checksum comparison (float64 sums may differ in the last bits across thread counts)."""


def register_weight_sync_strategy(name: str, *, builtin: bool = False) -> Callable[[S], S]:
    """Class decorator registering a `WeightSyncStrategy` subclass under `name` (also stored as `cls.name`)."""

    def decorator(cls: S) -> S:
        cls.name = name
        WEIGHT_SYNC_STRATEGIES.add(name, cls, builtin=builtin)
        return cls

    return decorator


_COMPOSITE_SENDERS: dict[str, type[WeightSender]] = {}
"""Senders made of other strategies' senders (e.g. `mixed`); built by name but not `weight_sync_backend` choices."""


def register_composite_sender(name: str, sender_cls: type[WeightSender]) -> None:
    """Let `make_sender(name, ...)` build `sender_cls` (a sender that drives several strategies' senders)."""
    _COMPOSITE_SENDERS[name] = sender_cls


def make_sender(strategy_name: str, init_info: dict[str, Any]) -> WeightSender:
    """Build the sender half of strategy `strategy_name` in this process (blocks while its transport connects)."""
    if strategy_name in _COMPOSITE_SENDERS:
        return _COMPOSITE_SENDERS[strategy_name](init_info)
    return WEIGHT_SYNC_STRATEGIES.get(strategy_name).sender_cls(init_info)


def make_receiver(strategy_name: str, init_info: dict[str, Any], engine: WeightTarget) -> WeightReceiver:
    """Build the receiver half of strategy `strategy_name` for a local `engine` (blocks while it connects)."""
    return WEIGHT_SYNC_STRATEGIES.get(strategy_name).receiver_cls(init_info, engine)


def make_weight_sync_strategy(name: str, **options: Any) -> WeightSyncStrategy:
    """Create the coordinator of strategy `name`; `options` go to its constructor (e.g. `chunk_bytes`)."""
    return WEIGHT_SYNC_STRATEGIES.get(name)(**options)


def resolve_strategy_name(backend: str, colocated: bool, device: str) -> str:
    """`generator.inference_engine.weight_sync_backend` with `auto` resolved without looking at where the engines
    run: `cuda_ipc` (GPU) or `shm` (CPU) when colocated, else `broadcast` (what a one-GPU or one-node run gets). The
    trainer resolves `auto` per engine instead (`node_aware.connect_weight_sync`), so colocated engines on another
    GPU or node get `broadcast`."""
    if backend != "auto":
        return backend
    if not colocated:
        return "broadcast"
    return "cuda_ipc" if device == "cuda" else "shm"


class WeightSenderHost:
    """Mixin for the Ray actor that holds the trained weights (policy rank 0): the coordinator calls
    `init_weight_sender` on it, and the actor sends with `self.weight_sender.send(named_tensors, version)`.

    A worker would add e.g. `def sync_weights(self, version): named = self.get_weights(...); return
    self.weight_sender.send(named, version) if self.rank == 0 else None`; `self.weight_sender.dtype` is the dtype
    the engines hold, so gathering in it avoids a second cast.
    """

    _weight_sender: Optional[WeightSender] = None

    def init_weight_sender(self, strategy_name: str, init_info: dict[str, Any]) -> None:
        """Create (or replace) this actor's sender for strategy `strategy_name`."""
        self.close_weight_sender()
        self._weight_sender = make_sender(strategy_name, init_info)

    def close_weight_sender(self) -> None:
        """Release this actor's sender (e.g. unlink its shared-memory block) before the actor is killed."""
        sender, self._weight_sender = self._weight_sender, None
        if sender is not None:
            sender.close()

    def weight_sender_node_id(self) -> str:
        """The Ray node this actor runs on (where the sender's local transports reach)."""
        return ray.get_runtime_context().get_node_id()

    def weight_sender_location(self, device: str = "cpu") -> dict[str, Any]:
        """Where this actor runs (`locations.Location` as plain data): node, visible GPUs, and on `cuda` the GPU its
        tensors live on; the coordinator plans which transport reaches each engine from it."""
        return this_location(device).as_dict()

    @property
    def weight_sender(self) -> WeightSender:
        """The sender made by `init_weight_sender`."""
        if self._weight_sender is None:
            raise WeightSyncError("no weight sender yet: the coordinator must call init_weight_sender first")
        return self._weight_sender


def engine_handle(engine: Any, index: int) -> Any:
    """The Ray actor handle of `engines[index]` (a `RayEngineProxy`); a clear error for anything else."""
    handle = getattr(engine, "handle", None)
    if handle is None:
        raise TypeError(
            f"engines[{index}]: expected a RayEngineProxy (an engine with a Ray actor `.handle`), got "
            f"{type(engine).__name__}"
        )
    return handle


class WeightSyncStrategy(abc.ABC):
    """Coordinates one weight-sync transport between a sender and N engine actors (see the module docstring).

    Args:
        chunk_bytes: largest chunk moved at once (bytes after casting to the engines' dtype).
        compute_checksums: the sender returns per-tensor checksums with every send (needed by `verify`).
        timeout_s: how long any side waits for the others (rendezvous, acknowledgements, collectives).
    """

    name: ClassVar[str] = ""
    sender_cls: ClassVar[type[WeightSender]]
    receiver_cls: ClassVar[type[WeightReceiver]]

    def __init__(
        self,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        compute_checksums: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
        self.chunk_bytes = chunk_bytes
        self.compute_checksums = compute_checksums
        self.timeout_s = timeout_s
        self.engines: list[Any] = []
        self.handles: list[Any] = []
        self.version = 0
        self._local_sender: Optional[WeightSender] = None
        self._remote_sender: Any = None

    @classmethod
    def options_from_config(cls, cfg: Any) -> dict[str, Any]:
        """Constructor options this strategy reads from the run config (`SkyRLConfig`); none by default."""
        return {}

    @abc.abstractmethod
    def build_init_infos(
        self, common: dict[str, Any], engine_infos: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Strategy-specific `init_info` of the sender and of each engine's receiver, from the shared fields."""

    async def init(self, sender: Any, engines: list[Any]) -> None:
        """Create the receivers in `engines` (RayEngineProxy list) and the sender: in this process when `sender` is
        None, else in the Ray actor `sender` (which must offer `init_weight_sender`, see `WeightSenderHost`)."""
        if not engines:
            raise ValueError("init: engines is empty; weight sync needs at least one engine")
        self.engines = list(engines)
        self.handles = [engine_handle(engine, index) for index, engine in enumerate(engines)]
        engine_infos, common = await self.describe_engines()
        sender_info, receiver_infos = self.build_init_infos(common, engine_infos)
        sender_info = {**sender_info, "engine_handles": self.handles}
        receivers = [
            handle.init_weight_receiver.remote(self.name, info) for handle, info in zip(self.handles, receiver_infos)
        ]
        if sender is None:
            creating = asyncio.to_thread(make_sender, self.name, sender_info)
        else:
            creating = sender.init_weight_sender.remote(self.name, sender_info)
        made, *_ = await asyncio.wait_for(asyncio.gather(creating, *receivers), timeout=self.timeout_s)
        self._local_sender = made if sender is None else None
        self._remote_sender = sender

    async def describe_engines(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Each engine's `engine_info` (of `self.handles`), and the fields every side's `init_info` shares; the
        engines must agree on dtype and device."""
        engine_infos = list(await asyncio.gather(*(handle.engine_info.remote() for handle in self.handles)))
        for key in ("dtype", "device"):
            values = sorted({info[key] for info in engine_infos})
            if len(values) != 1:
                raise WeightSyncError(f"init: the engines must share one {key}, got {values}")
        self.version = max(info["weight_version"] for info in engine_infos)
        common = {
            "dtype": engine_infos[0]["dtype"],
            "device": engine_infos[0]["device"],
            "chunk_bytes": self.chunk_bytes,
            "timeout_s": self.timeout_s,
            "compute_checksums": self.compute_checksums,
            "start_version": self.version,
            "engine_node_ids": [info["node_id"] for info in engine_infos],
            "engine_locations": [Location.from_dict(info).as_dict() for info in engine_infos],
        }
        return engine_infos, common

    async def sync(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: Optional[int] = None
    ) -> SendResult:
        """Send `named_tensors` from this process (needs `init(sender=None, ...)`), then `confirm` the version."""
        if self._local_sender is None:
            raise WeightSyncError(
                "sync() sends from this process, but init() was given a remote sender; call the sender actor's "
                "send (weight_sender.send) and then confirm(version)"
            )
        result = await asyncio.to_thread(self._local_sender.send, list(named_tensors), version)
        await self.confirm(result.version, result.served_versions)
        return result

    async def confirm(self, version: int, served: Optional[list[int]] = None) -> list[int]:
        """Check that every engine serves `version` (raises `WeightSyncError` naming the others); returns versions.

        `served` is the send's `SendResult.served_versions`: the versions the engines acknowledged the final chunk
        with, in the sender's engine order. When it covers every engine the check uses it and costs no round trip
        (the engines' proxies learn the versions too); otherwise each engine is asked.
        """
        if served is not None and len(served) == len(self.engines):
            by_engine = dict(zip(self.sender_engine_order(), served))
            versions = [int(by_engine[index]) for index in range(len(self.engines))]
            for engine, value in zip(self.engines, versions):
                note = getattr(engine, "note_weight_version", None)  # a RayEngineProxy remembers what it serves
                if note is not None:
                    note(value)
        else:
            versions = list(await asyncio.gather(*(engine.fetch_weight_version() for engine in self.engines)))
        behind = {index: value for index, value in enumerate(versions) if value != version}
        if behind:
            raise WeightSyncError(f"after syncing version {version}, engines serve other versions: {behind}")
        self.version = version
        return versions

    def can_defer_install(self) -> bool:
        """Whether every engine can take a sync's final chunk with its next generate call (`defer_install`): each is
        a proxy that sends it along (`RayEngineProxy.install_before_generate`)."""
        return all(hasattr(engine, "install_before_generate") for engine in self.engines)

    def defer_install(self, version: int, chunk: WeightChunk) -> None:
        """After a send that left its final `chunk` uninstalled (`SendResult.deferred`): every engine installs it at
        the start of its next generate call, and its proxy checks the version it then serves (the confirmation
        `confirm` gives otherwise). `install_deferred` must run before the next send writes over the payload."""
        if not self.can_defer_install():
            raise WeightSyncError("defer_install: an engine cannot install weights with its generate calls")
        for engine in self.engines:
            engine.install_before_generate(chunk)
        self.version = version

    async def install_deferred(self) -> None:
        """Install a deferred final chunk in every engine that has not generated since (no-op when none waits)."""
        waiting = [engine for engine in self.engines if getattr(engine, "pending_weights", None) is not None]
        if waiting:
            await asyncio.gather(*(engine.install_pending_weights() for engine in waiting))

    def sender_engine_order(self) -> list[int]:
        """The engine index of each position in the sender's `engine_handles` (and so in `served_versions`)."""
        return list(range(len(self.engines)))

    async def verify(self, expected_checksums: dict[str, float]) -> VerifyReport:
        """Compare every engine's checksums with the sender's; raise `WeightSyncError` naming mismatching params."""
        if not expected_checksums:
            raise ValueError("verify: expected_checksums is empty; create the strategy with compute_checksums=True")
        served = await asyncio.gather(*(handle.weights_checksum.remote() for handle in self.handles))
        reported = set().union(*(set(checksums) for checksums in served))
        mismatches: dict[int, list[str]] = {}
        checked = 0
        for engine_index, checksums in enumerate(served):
            for name, expected in expected_checksums.items():
                if name not in checksums:
                    continue
                checked += 1
                if not math.isclose(checksums[name], expected, rel_tol=CHECKSUM_REL_TOL, abs_tol=CHECKSUM_REL_TOL):
                    mismatches.setdefault(engine_index, []).append(name)
        report = VerifyReport(
            num_engines=len(served),
            num_checked=checked,
            unreported=sorted(set(expected_checksums) - reported),
            mismatches=mismatches,
        )
        if mismatches:
            details = "; ".join(f"engine {index}: {names}" for index, names in sorted(mismatches.items()))
            raise WeightSyncError(f"verify: engines serve weights that differ from the sender's: {details}")
        return report

    async def close(self) -> None:
        """Release the receivers and a local sender; `init` must run again before the next sync."""
        if self._local_sender is not None:
            self._local_sender.close()
            self._local_sender = None
        await asyncio.gather(*(handle.close_weight_receiver.remote() for handle in self.handles))
