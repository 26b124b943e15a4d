"""Inference engines as Ray actors: `EngineActor` hosts an engine, `RayEngineProxy` is its `InferenceEngine` face.

`create_engine_actors(num_engines, model_path, cfg)` starts the actors (optionally in a placement group) and returns
one proxy per actor; the proxies forward every `InferenceEngine` call to their actor, so `InferenceEngineClient`
works on them unchanged. The calls both forward unchanged are listed once (`PASS_THROUGH`) and added by the
`_forwarding` class decorator; the rest (the proxy's `generate` and `update_weights`, which track the served version,
`teardown`) are written out. On the driver's machine the proxy's generate calls skip Ray's call path and go through
a Unix socket the actor serves (`skyrl_train.utils.local_channel`). The actor also hosts the receiving half of
weight sync (`init_weight_receiver`, `receive_weights`; see `skyrl_train.weight_sync`): an engine may bring its own
receiver for a strategy (`make_weight_receiver`, e.g. the sglang engine's workers join a `broadcast` group
themselves), else the strategy's generic one installs through `update_weights`.

The actor builds its engine with the backend's builder (`skyrl_train.inference.engine_builders`; `EngineSettings`,
`ENGINE_BUILDERS` and `check_engine_backend` are importable from here too), whose preflight `create_engine_actors` runs
before any actor starts.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import logging
import os
import pickle
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Optional

import ray
import torch

from skyrl_train.inference.base import InferenceEngine
from skyrl_train.inference.engine_builders import ENGINE_BUILDERS, EngineSettings, check_engine_backend
from skyrl_train.inference.tensor_parallel import runs_vllm_ray_workers, vllm_tensor_parallel_layout
from skyrl_train.inference.types import InferenceEngineInput, InferenceEngineOutput
from skyrl_train.models.loading import resolve_dtype
from skyrl_train.utils.local_channel import ChannelClient, ChannelClients, ChannelError, ChannelServer
from skyrl_train.utils.memory import read_rss
from skyrl_train.utils.threads import actor_threads
from skyrl_train.weight_sync.base import WeightChunk, WeightReceiver, WeightSyncError
from skyrl_train.weight_sync.chunks import dtype_name
from skyrl_train.weight_sync.locations import this_location
from skyrl_train.weight_sync.strategy import make_receiver

logger = logging.getLogger(__name__)


PASS_THROUGH = (
    "sleep",
    "wake_up",
    "pause",
    "resume",
    "init_weight_update",
    "reset_prefix_cache",
    "weights_checksum",
    "take_cache_counts",
)
"""`InferenceEngine` calls forwarded unchanged: by `EngineActor` to its engine, by `RayEngineProxy` to its actor."""


def _forward(name: str, to_actor: bool) -> Callable[..., Any]:
    """A method running `InferenceEngine.<name>` unchanged in `self.handle`'s actor (`to_actor`) or on `self.engine`."""

    @functools.wraps(getattr(InferenceEngine, name), updated=())  # name, docstring, signature; not the abstract flag
    async def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if to_actor:
            return await getattr(self.handle, name).remote(*args, **kwargs)
        return await getattr(self.engine, name)(*args, **kwargs)

    return forward


def _forwarding(names: tuple[str, ...], to_actor: bool) -> Callable[[type], type]:
    """Class decorator adding a `_forward` method for each of `names` (the ABC then counts them as implemented)."""

    def decorate(cls: type) -> type:
        for name in names:
            if name in vars(cls):
                raise TypeError(f"{cls.__name__} defines {name} itself; drop it from the forwarded names")
            setattr(cls, name, _forward(name, to_actor))
        return abc.update_abstractmethods(cls)

    return decorate


@_forwarding(("generate", *PASS_THROUGH), to_actor=False)
class EngineActor:
    """A Ray actor (async methods) holding one inference engine and, once initialised, a weight receiver."""

    def __init__(self, settings: EngineSettings) -> None:
        torch.set_num_threads(settings.num_threads)
        self.settings = settings
        builder: Callable[[EngineSettings], InferenceEngine] = ENGINE_BUILDERS.get(settings.backend)
        self.engine = builder(settings)
        self.receiver: Optional[WeightReceiver] = None
        self._installing: Optional[asyncio.Lock] = None  # made in the actor's event loop, on first use
        self._channel: Optional[ChannelServer] = None

    async def engine_info(self) -> dict[str, Any]:
        """Node, visible GPUs, process, dtype, device, served version (what weight-sync coordinators need to know:
        `locations.plan_weight_sync` picks each engine's transport from its node and GPUs) and resident memory."""
        model = getattr(self.engine, "model", None)
        parameter = next(model.parameters(), None) if model is not None else None
        dtype = parameter.dtype if parameter is not None else resolve_dtype(self.settings.dtype)
        return {
            **this_location().as_dict(),
            "node_ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "dtype": dtype_name(dtype),
            "device": torch.device(self.settings.device).type,
            "weight_version": self.engine.weight_version,
            "torch_threads": torch.get_num_threads(),
            "sync_ranks": int(getattr(self.engine, "weight_sync_ranks", 1)),
            **(read_rss() or {}),  # resident memory now and at its peak (`rss`, `peak_rss`, bytes)
        }

    async def generate_pickled(self, request: bytes, weights: Optional[WeightChunk] = None) -> bytes:
        """`generate` with the request and the output pickled as one bytes object each (what `RayEngineProxy`
        sends): Ray serialises a bytes object with almost no work, while an output's nested lists (ids, log-probs
        and versions per sample) cost it more than pickle does.

        `weights` is the final chunk of a sync whose installation was left to this call (`SendResult.deferred`):
        it is installed first unless the engine already serves its version (an earlier call installed it)."""
        output = await self.generate_installing(pickle.loads(request), weights)
        return pickle.dumps(output, protocol=pickle.HIGHEST_PROTOCOL)

    async def generate_installing(
        self, request: InferenceEngineInput, weights: Optional[WeightChunk] = None
    ) -> InferenceEngineOutput:
        """`generate`, after installing `weights` (a deferred final chunk, see `generate_pickled`) if given."""
        if weights is not None:
            await self.install_if_behind(weights)
        return await self.engine.generate(request)

    async def open_channel(self, caller_node_id: str) -> Optional[str]:
        """The path of a Unix socket serving `generate_installing` and `install_if_behind` in this actor's event loop
        (`local_channel`; a request names which, see `serve_channel`), started on first use; None when the caller
        runs on another machine (its calls stay with Ray)."""
        if caller_node_id != ray.get_runtime_context().get_node_id():
            return None
        if self._channel is None:
            self._channel = ChannelServer(self.serve_channel)
        return await self._channel.start()

    async def serve_channel(self, call: str, *args: Any) -> Any:
        """One request of the local channel: `("generate", request, weights)` or `("install", chunk)`."""
        if call == "generate":
            return await self.generate_installing(*args)
        if call == "install":
            return await self.install_if_behind(*args)
        raise ValueError(f"the engine's channel serves 'generate' and 'install', not {call!r}")

    async def install_if_behind(self, chunk: WeightChunk) -> int:
        """Receive `chunk` (the final chunk of a sync) unless the engine already serves its version; concurrent
        callers install it once. Returns the version served afterwards."""
        if self._installing is None:
            self._installing = asyncio.Lock()
        async with self._installing:
            if self.engine.weight_version < chunk.version:
                await self.receive_weights(chunk)
        return self.engine.weight_version

    async def take_compute_seconds(self) -> dict[str, float]:
        """The engine's compute seconds since the last call (`{}` for engines without a `compute_clock`)."""
        clock = getattr(self.engine, "compute_clock", None)
        return clock.take() if clock is not None else {}

    async def take_compute_spans(self) -> list[tuple[str, float, float]]:
        """When the engine decoded (wall clock) since the last call, for the run's timeline (`[]` for engines
        without a `compute_clock`)."""
        clock = getattr(self.engine, "compute_clock", None)
        return clock.spans.take() if clock is not None else []

    async def weight_version(self) -> int:
        """The version the engine serves."""
        return self.engine.weight_version

    async def update_weights(self, named_tensors: list[tuple[str, torch.Tensor]], version: int) -> int:
        """Forwarded `InferenceEngine.update_weights` (tensors travel through Ray); returns the served version."""
        await self.engine.update_weights(named_tensors, version)
        return self.engine.weight_version

    async def teardown(self) -> None:
        """Close the local channel and the weight receiver, and tear the engine down."""
        if self._channel is not None:
            await self._channel.close()
        await self.close_weight_receiver()
        await self.engine.teardown()

    async def init_weight_receiver(self, strategy_name: str, init_info: dict[str, Any]) -> None:
        """Create this engine's receiver of weight-sync strategy `strategy_name` (replacing an earlier one): the
        engine's own (`make_weight_receiver`) when it has one for the strategy, else the strategy's generic one."""
        await self.close_weight_receiver()
        own = getattr(self.engine, "make_weight_receiver", None)
        receiver = await own(strategy_name, init_info) if own is not None else None
        if receiver is None:
            receiver = await asyncio.to_thread(make_receiver, strategy_name, init_info, self.engine)
        self.receiver = receiver

    async def receive_weights(self, chunk: WeightChunk) -> int:
        """Receive and install one chunk from the sender; returns the version served afterwards."""
        if self.receiver is None:
            raise RuntimeError("receive_weights: no weight receiver; call init_weight_receiver first")
        return await self.receiver.receive(chunk)

    async def close_weight_receiver(self) -> None:
        """Drop the weight receiver, if any (awaiting its `aclose` when it has one)."""
        receiver, self.receiver = self.receiver, None
        if receiver is not None:
            aclose = getattr(receiver, "aclose", None)
            if aclose is not None:
                await aclose()
            else:
                receiver.close()


@_forwarding(PASS_THROUGH, to_actor=True)
class RayEngineProxy(InferenceEngine):
    """An `InferenceEngine` whose calls run in an `EngineActor` (`handle`).

    `weight_version` is the last version this proxy saw (from generate outputs, weight updates or
    `fetch_weight_version`); weight syncs that bypass the proxy update it through `fetch_weight_version`, or
    `note_weight_version` with the version the engine acknowledged.
    """

    def __init__(self, handle: Any, version: int = 0) -> None:
        self.handle = handle
        self._version = version
        self._pending_weights: Optional[WeightChunk] = None
        self._installing_ahead: set[asyncio.Task] = set()  # `install_ahead` tasks (asyncio keeps only weak references)
        self._channels: Optional[ChannelClients] = None  # each calling event loop's connection to the actor
        self._channel_state = "untried"  # "untried", "open" (a path to connect to), "ray" (calls go through Ray)

    @property
    def weight_version(self) -> int:
        """The last served version this proxy observed."""
        return self._version

    async def fetch_weight_version(self) -> int:
        """Ask the actor which version it serves (and remember it)."""
        self._version = await self.handle.weight_version.remote()
        return self._version

    def note_weight_version(self, version: int) -> None:
        """Remember `version` as served, as the actor reported it otherwise (e.g. in a weight-sync acknowledgement)."""
        self._version = int(version)

    def install_before_generate(self, chunk: WeightChunk) -> None:
        """Have the actor install `chunk` (the final chunk of a sync, `SendResult.deferred`) at the start of the next
        generate call; `install_pending_weights` installs it without one.

        Called in a running event loop with the actor's local channel open, the proxy also sends `chunk` right away
        without waiting (`install_ahead`): the actor installs it while the caller prepares its next generate call
        (between two training steps the policy ranks are done and the engines idle), and that call then finds it
        installed (the actor installs a chunk once) and confirms the served version all the same. When the running
        loop's connection is open, the request is written before this returns: a task would send it only when the
        caller next yields to its event loop, after the rest of its step, and the installation would then overlap
        the next step's start."""
        self._pending_weights = chunk
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._channel_state == "open":
            client = self._channels.for_running_loop()
            sent = None
            if client.connected:
                with contextlib.suppress(Exception):  # the task's own call then reports what fails
                    sent = client.send("install", chunk)
            task = loop.create_task(self.install_ahead(chunk, sent))
            self._installing_ahead.add(task)
            task.add_done_callback(self._installing_ahead.discard)

    async def install_ahead(self, chunk: WeightChunk, sent: Optional[Awaitable[int]] = None) -> None:
        """Install `chunk` through the local channel now (`sent`: the reply of an install request already written);
        when that fails, the next generate call (or `install_pending_weights`) installs it through its own request and
        raises what fails there."""
        try:
            if sent is None:
                channel = await self._local_channel()
                if channel is None:
                    return
                sent = channel.call("install", chunk)
            version = await sent
        except Exception as exc:  # noqa: BLE001 - retried (and raised) by the call that carries the chunk
            logger.warning("engine %s: installing weight version %d ahead failed: %r", self.handle, chunk.version, exc)
            return
        if version >= chunk.version and self._pending_weights is chunk:  # else the generate call's check raises
            self._served(version, chunk)

    @property
    def pending_weights(self) -> Optional[WeightChunk]:
        """The deferred chunk no generate call has installed yet, else None."""
        return self._pending_weights

    async def install_pending_weights(self) -> None:
        """Install the deferred chunk now, when no generate call has (before the next sync overwrites its payload)."""
        pending = self._pending_weights
        if pending is not None:
            self._served(await self.handle.install_if_behind.remote(pending), pending)

    async def generate(self, request: InferenceEngineInput) -> InferenceEngineOutput:
        """Generate in the actor, installing the deferred chunk first when there is one. On the actor's machine the
        call goes through its local channel (`utils.local_channel`: a Unix socket, cheaper than a Ray call);
        elsewhere, or once that channel failed, through Ray (request and output pickled:
        `EngineActor.generate_pickled`)."""
        pending = self._pending_weights
        channel = await self._local_channel()
        output = None
        if channel is not None:
            try:
                output = await channel.call("generate", request, pending)
            except ChannelError:
                self._channel_state = "ray"  # the actor's channel is gone: Ray says why, or serves the call
        if output is None:
            packed = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
            output = pickle.loads(await self.handle.generate_pickled.remote(packed, pending))
        if pending is not None:
            self._served(output.weight_version, pending)
        self._version = output.weight_version
        return output

    async def _local_channel(self) -> Optional[ChannelClient]:
        """A connection to the actor's local channel for the running event loop (each loop calling the proxy has its
        own: the training loop, an HTTP endpoint's thread), or None when calls go through Ray (the actor runs on
        another machine, or its channel failed)."""
        if self._channel_state == "untried":
            opener = getattr(self.handle, "open_channel", None)  # an actor class of its own may not serve one
            node = ray.get_runtime_context().get_node_id()
            path = None if opener is None else await opener.remote(node)
            # concurrent first calls (fully_async starts many at once) all asked; the first answer decides, so every
            # caller shares one set of connections (a second set would be dropped with its reader tasks pending)
            if self._channel_state == "untried":
                self._channel_state = "ray" if path is None else "open"
                if path is not None:
                    self._channels = ChannelClients(path, f"engine actor {self.handle}")
        if self._channel_state != "open":
            return None
        return self._channels.for_running_loop()

    def _served(self, version: int, installed: WeightChunk) -> None:
        """After the actor was asked to install `installed`: it must serve its version (or a later one)."""
        if version < installed.version:
            raise WeightSyncError(
                f"engine {self.handle} serves weight version {version}, not the version {installed.version} it was "
                "asked to install"
            )
        self._version = version
        if self._pending_weights is installed:
            self._pending_weights = None

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Ship the tensors to the actor through Ray and install them (fine for small models; syncs use a
        `skyrl_train.weight_sync` strategy)."""
        self._version = await self.handle.update_weights.remote(list(named_tensors), version)

    async def teardown(self, timeout_s: float = 30.0) -> None:
        """Tear the engine down and end the actor; returns once the actor is gone (`ray.kill` only asks for it, so
        a call right after it could otherwise still be answered)."""
        for task in list(self._installing_ahead):
            task.cancel()
        if self._channels is not None:
            self._channels.close()
        self._channel_state = "ray"
        try:
            await self.handle.teardown.remote()
        finally:
            ray.kill(self.handle)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                await self.handle.__ray_ready__.remote()
            except ray.exceptions.RayActorError:
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"engine actor {self.handle} still answers {timeout_s:g} s after ray.kill")


def create_engine_actors(
    num_engines: int,
    model_path: str,
    cfg: Any,
    placement_group: Any = None,
    bundles: Optional[Sequence[int]] = None,
    num_cpus_per_engine: float = 1.0,
    num_gpus_per_engine: Optional[float] = None,
    num_threads: Optional[int] = None,
    tokenizer_path: Optional[str] = None,
) -> list[RayEngineProxy]:
    """Start `num_engines` engine actors serving `model_path` (settings from `cfg`) and wait until they loaded.

    With a `placement_group`, engine i takes bundle `bundles[i]` (default: bundle i). `num_gpus_per_engine` defaults to the
    tensor-parallel size on CUDA (one GPU per tensor-parallel worker) and 0 on CPU; `num_threads` is each actor's
    torch thread count (default: `num_cpus_per_engine` rounded down, at least 1). A tensor-parallel vllm engine on CUDA
    needs a placement group of one-GPU bundles: engine i spans `bundles[i * tp : (i + 1) * tp]`, and
    `num_gpus_per_engine` (default 1) is its share of each (`skyrl_train.inference.tensor_parallel.vllm_tensor_parallel_layout`).
    """
    if num_engines < 1:
        raise ValueError(f"num_engines must be >= 1, got {num_engines}")
    threads = actor_threads(num_threads, num_cpus_per_engine)
    settings = EngineSettings.from_config(cfg, model_path, tokenizer_path=tokenizer_path, num_threads=threads)
    check_engine_backend(settings)  # fail here, not in the actors
    tp_workers = runs_vllm_ray_workers(settings.backend, settings.tensor_parallel_size, settings.device)
    if tp_workers and placement_group is None:
        raise ValueError(
            f"a vllm engine with tensor_parallel_size={settings.tensor_parallel_size} runs its ranks as Ray workers in "
            "one-GPU bundles of a placement group: pass placement_group (skyrl_train.placement.plan_placement makes it)"
        )
    if num_gpus_per_engine is None:
        on_cuda = torch.device(settings.device).type == "cuda"
        num_gpus_per_engine = 1.0 if tp_workers else settings.tensor_parallel_size if on_cuda else 0
    actor_class = ray.remote(EngineActor)
    handles = []
    if settings.backend == "remote" and len(settings.remote_urls) != num_engines:
        raise ValueError(
            f"the remote backend starts one engine per URL: num_engines={num_engines} but "
            f"remote_urls={list(settings.remote_urls)}"
        )
    for index in range(num_engines):
        own = replace(settings, remote_urls=(settings.remote_urls[index],)) if settings.remote_urls else settings
        bundle, gpus = (index if bundles is None else bundles[index]), num_gpus_per_engine
        if tp_workers:
            layout = vllm_tensor_parallel_layout(index, settings.tensor_parallel_size, bundles, gpus)
            bundle, gpus = layout.actor_bundle, layout.actor_gpus
            own = replace(own, ray_worker_bundles=layout.worker_bundles, ray_worker_gpus=layout.worker_gpus)
        options: dict[str, Any] = {"num_cpus": num_cpus_per_engine, "num_gpus": gpus}
        if placement_group is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            # capturing child tasks also makes this group the one vLLM's Ray executor finds (tensor parallelism)
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=placement_group,
                placement_group_bundle_index=bundle,
                placement_group_capture_child_tasks=True,
            )
        handles.append(actor_class.options(**options).remote(own))
    infos = ray.get([handle.engine_info.remote() for handle in handles])
    return [RayEngineProxy(handle, info["weight_version"]) for handle, info in zip(handles, infos)]
