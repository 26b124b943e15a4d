"""`WorkerGroup`: the Ray actors of one role, created with a shared rendezvous, and helpers that dispatch to them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from skyrl_train.config.root import SkyRLConfig
from skyrl_train.training_batch import TrainingBatch, integers_at_full_width, on_wire
from skyrl_train.utils.local_channel import ChannelClients, ChannelError
from skyrl_train.utils.threads import actor_threads
from skyrl_train.workers.dispatch import (
    ShardableBatch,
    data_parallel_ranks,
    join_results,
    representative_ranks,
    shard_arguments,
)

logger = logging.getLogger(__name__)


def role_model_parallel_size(cfg: Mapping[str, Any], role: str) -> int:
    """Ranks of `role` that hold one model copy and get the same rows: on `trainer.strategy: megatron` the tensor *
    pipeline * context parallel sizes, else the role's sequence-parallel size (its ranks split each packed
    sequence), 1 without it."""
    megatron = _megatron_section(cfg, role)
    if megatron is None:
        return int(cfg.get("trainer", {}).get(role, {}).get("sequence_parallel_size", 1))
    return (
        int(megatron.get("tensor_model_parallel_size", 1))
        * int(megatron.get("pipeline_model_parallel_size", 1))
        * (int(megatron.get("context_parallel_size", 1)))
    )


def role_consecutive_ranks(cfg: Mapping[str, Any], role: str) -> int:
    """How many ranks of one model copy are consecutive: all of them, except on Megatron with pipeline stages, whose
    rank order puts the stages outermost (only the tensor * context ranks of one stage are consecutive)."""
    megatron = _megatron_section(cfg, role)
    if megatron is None:
        return role_model_parallel_size(cfg, role)
    return int(megatron.get("tensor_model_parallel_size", 1)) * int(megatron.get("context_parallel_size", 1))


def _megatron_section(cfg: Mapping[str, Any], role: str) -> Optional[Mapping[str, Any]]:
    trainer = cfg.get("trainer", {})
    if role not in ("policy", "ref") or trainer.get("strategy") != "megatron":
        return None
    return trainer.get(role, {}).get("megatron", {})


class WorkerGroupError(RuntimeError):
    """A rank of a worker group is gone (its actor or node died, or its result was lost); names the role, rank and
    method."""


class WorkerGroup:
    """`num_workers` Ray actors of `worker_cls` forming one data-parallel (FSDP) group for `role`.

    Rank 0 picks the rendezvous address (its node IP and a free port) and the other ranks join it. When
    `worker_cls` has `set_master_address` (every `BaseWorker`), all ranks start at once, so their processes load
    their libraries side by side, and are told rank 0's address once it runs; a class without it gets the address at
    construction, rank 0 first. With a placement group, rank r runs in bundle `bundles[r]` (default: bundle r). Each
    actor runs `num_threads` torch threads (default `max(1, int(num_cpus_per_worker))`).

    A group serves one call at a time: every rank runs the group's collectives in the order its calls come, so a
    caller awaits each call before the next (the trainer does). The `_async` calls go through the ranks' local
    channels when all of them run on this machine (`workers.channel`), the others through Ray.

    A call fails as soon as one rank fails. When a rank's method raises while others still run, the group first
    waits up to `dead_peer_grace_s` for another rank to turn out dead: a collective whose peer died fails at once on
    the live ranks, and the dead rank is the error worth reporting.
    """

    dead_peer_grace_s: float = 3.0

    def __init__(
        self,
        role: str,
        worker_cls: type,
        num_workers: int,
        cfg: SkyRLConfig | Mapping[str, Any],
        placement_group: Optional[Any] = None,
        bundles: Optional[Sequence[int]] = None,
        num_cpus_per_worker: float = 1,
        num_gpus_per_worker: float = 0,
        num_threads: Optional[int] = None,
    ) -> None:
        if num_workers <= 0:
            raise ValueError(f"num_workers must be positive, got {num_workers}")
        if bundles is not None and len(bundles) < num_workers:
            raise ValueError(f"{role}: {num_workers} workers need as many placement-group bundles, got {list(bundles)}")
        self.role = role
        cfg_dict = cfg.to_dict() if isinstance(cfg, SkyRLConfig) else dict(cfg)
        self.model_parallel_size = role_model_parallel_size(cfg_dict, role)
        self.data_parallel_ranks = data_parallel_ranks(
            num_workers, self.model_parallel_size, role_consecutive_ranks(cfg_dict, role)
        )
        self.representative_ranks = representative_ranks(self.data_parallel_ranks)
        remote_cls = ray.remote(worker_cls)
        threads = actor_threads(num_threads, num_cpus_per_worker)

        def actor_class(rank: int) -> Any:
            options: dict[str, Any] = {"num_cpus": num_cpus_per_worker, "num_gpus": num_gpus_per_worker}
            if placement_group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=placement_group,
                    placement_group_bundle_index=rank if bundles is None else bundles[rank],
                )
            return remote_cls.options(**options)

        self.actors: list[Any] = []
        told_later = hasattr(worker_cls, "set_master_address")
        try:
            # told later: every rank imports torch & co. (seconds of CPU each) at the same time
            for rank in range(num_workers if told_later else 1):
                self.actors.append(actor_class(rank).remote(role, rank, num_workers, None, None, cfg_dict, threads))
            master_addr, master_port = ray.get(self.actors[0].master_address.remote())
            if told_later:
                calls = [actor.set_master_address.remote(master_addr, master_port) for actor in self.actors[1:]]
                self.wait_all(calls, "set_master_address", ranks=list(range(1, num_workers)))
            else:
                for rank in range(1, num_workers):
                    self.actors.append(
                        actor_class(rank).remote(role, rank, num_workers, master_addr, master_port, cfg_dict, threads)
                    )
        except BaseException:
            # the ranks made so far would live on (holding their CPUs/GPUs) as long as anything held the traceback
            for actor in self.actors:
                ray.kill(actor, no_restart=True)
            raise
        logger.info("%s group: %d workers rendezvous at %s:%d", role, num_workers, master_addr, master_port)
        # "untried", "open" (every rank's channel), "ray" (calls go through Ray: also a class that serves none)
        self._channel_state = "untried" if hasattr(worker_cls, "open_channel") else "ray"
        self._channels: list[ChannelClients] = []

    @property
    def world_size(self) -> int:
        """Number of actors (data-parallel ranks)."""
        return len(self.actors)

    def init_model(self, model_path: Optional[str] = None, num_training_steps: Optional[int] = None) -> None:
        """Load and shard the model on every rank (the role's configured model when `model_path` is None)."""
        self.run_all("init_model", model_path, num_training_steps)

    def submit_all(self, method: str, *args: Any, **kwargs: Any) -> list[ray.ObjectRef]:
        """Call `method(*args, **kwargs)` on every actor; returns the object refs without waiting."""
        return [getattr(actor, method).remote(*args, **kwargs) for actor in self.actors]

    def run_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call `method(*args, **kwargs)` on every actor and wait; returns the per-rank results in rank order."""
        return self.wait_all(self.submit_all(method, *args, **kwargs), method)

    def run_sharded(self, method: str, batch: TrainingBatch | ShardableBatch, **kwargs: Any) -> Any:
        """Split `batch` (and per-row tensor kwargs) evenly over the ranks, call `method(shard, **shard_kwargs)` on
        each, and join the results: tensors concatenated in row order, metric dicts averaged (see `dispatch`)."""
        return self._join(self._call_each(method, self._sharded_calls(batch, kwargs)), len(batch))

    async def run_sharded_async(self, method: str, batch: TrainingBatch | ShardableBatch, **kwargs: Any) -> Any:
        """`run_sharded` awaited in the event loop, through the ranks' local channels when they run on this machine
        (`workers.channel`), else through Ray."""
        return self._join(await self._call_each_async(method, self._sharded_calls(batch, kwargs)), len(batch))

    def run_sharded_each(
        self, method: str, calls: list[tuple[TrainingBatch | ShardableBatch, dict[str, Any]]], **kwargs: Any
    ) -> list[Any]:
        """Several sharded calls in one round trip per rank: each `(batch, batch_kwargs)` of `calls` is split as
        `run_sharded` splits it, and each rank gets all its shards at once, `method([(shard, shard_kwargs), ...],
        **kwargs)`, which returns one result per shard. Returns the joined result of each call, in order."""
        return self._join_each(method, calls, self._call_each(method, self._sharded_each_calls(calls, kwargs)))

    async def run_sharded_each_async(
        self, method: str, calls: list[tuple[TrainingBatch | ShardableBatch, dict[str, Any]]], **kwargs: Any
    ) -> list[Any]:
        """`run_sharded_each` awaited in the event loop, through the ranks' local channels when they run on this
        machine (`workers.channel`), else through Ray."""
        per_rank = await self._call_each_async(method, self._sharded_each_calls(calls, kwargs))
        return self._join_each(method, calls, per_rank)

    # ----- sharding and transport ---------------------------------------------------------------------------------
    def _sharded_calls(self, batch: TrainingBatch | ShardableBatch, kwargs: dict[str, Any]) -> list[tuple[tuple, dict]]:
        """Each actor's `(args, kwargs)`: its data-parallel rank's shard of `batch` and of the per-row kwargs."""
        shards = shard_arguments(batch, self.world_size // self.model_parallel_size, kwargs)
        return [((shards[dp][0],), _on_wire(shards[dp][1])) for dp in self.data_parallel_ranks]

    def _sharded_each_calls(
        self, calls: list[tuple[TrainingBatch | ShardableBatch, dict[str, Any]]], kwargs: dict[str, Any]
    ) -> list[tuple[tuple, dict]]:
        """Each actor's `(args, kwargs)`: the list of its data-parallel rank's shards of every call."""
        num_shards = self.world_size // self.model_parallel_size
        sharded = [
            [
                (shard, _on_wire(shard_kwargs))
                for shard, shard_kwargs in shard_arguments(batch, num_shards, batch_kwargs)
            ]
            for batch, batch_kwargs in calls
        ]
        return [(([shards[dp] for shards in sharded],), kwargs) for dp in self.data_parallel_ranks]

    def _join(self, results: list[Any], num_rows: int) -> Any:
        return join_results([results[rank] for rank in self.representative_ranks], num_rows)

    def _join_each(self, method: str, calls: list[tuple[Any, dict[str, Any]]], results: list[Any]) -> list[Any]:
        per_rank = [results[rank] for rank in self.representative_ranks]
        for rank, rank_results in enumerate(per_rank):
            if len(rank_results) != len(calls):
                raise RuntimeError(
                    f"{self.role} {method} returned {len(rank_results)} results on data-parallel rank {rank}; "
                    f"expected one per call ({len(calls)})"
                )
        return [
            join_results([rank_results[position] for rank_results in per_rank], len(batch))
            for position, (batch, _) in enumerate(calls)
        ]

    def _call_each(self, method: str, per_actor: list[tuple[tuple, dict]]) -> list[Any]:
        """Call `method(*args, **kwargs)` with each actor's own arguments through Ray; results in rank order."""
        refs = [getattr(actor, method).remote(*args, **kwargs) for actor, (args, kwargs) in zip(self.actors, per_actor)]
        return self.wait_all(refs, method)

    async def _call_each_async(self, method: str, per_actor: list[tuple[tuple, dict]]) -> list[Any]:
        """`_call_each` awaited: through every rank's local channel when they all serve one to this machine (the
        first call asks them), else through Ray in a thread. Fails as soon as one rank fails, as `wait_all` does."""
        if self._channel_state == "untried":
            node = ray.get_runtime_context().get_node_id()
            paths = await asyncio.to_thread(self.run_all, "open_channel", node)
            if self._channel_state == "untried":  # concurrent first calls share the first one's connections
                if all(paths):
                    names = [f"{self.role} rank {rank}" for rank in range(self.world_size)]
                    self._channels = [ChannelClients(path, name) for path, name in zip(paths, names)]
                self._channel_state = "open" if all(paths) else "ray"
        if self._channel_state != "open":
            return await asyncio.to_thread(self._call_each, method, per_actor)
        with integers_at_full_width():  # the tasks pickle their arguments with this context's copy
            calls = [
                asyncio.ensure_future(channel.for_running_loop().call(method, args, kwargs))
                for channel, (args, kwargs) in zip(self._channels, per_actor)
            ]
        pending = set(calls)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                raised = any(call.exception() is not None for call in done)
                if raised and pending and not any(isinstance(call.exception(), ChannelError) for call in done):
                    # a collective with a peer that just died fails at once: give the peer's channel time to close
                    more, pending = await asyncio.wait(
                        pending, timeout=self.dead_peer_grace_s, return_when=asyncio.FIRST_EXCEPTION
                    )
                    done |= more
                for call in sorted(
                    done, key=lambda call: (not isinstance(call.exception(), ChannelError), calls.index(call))
                ):
                    error = call.exception()
                    if isinstance(error, ChannelError):  # the rank's actor (or its node) is gone: Ray says why
                        rank = calls.index(call)
                        reason = await asyncio.to_thread(self._why_unreachable, rank, error)
                        raise WorkerGroupError(
                            f"{self.role} rank {rank} of {len(calls)} failed in {method}: {reason}"
                        ) from error
                    if error is not None:
                        raise error  # the method raised, and no rank died: its own exception
        finally:
            for call in pending:
                call.cancel()
        return [call.result() for call in calls]

    def _why_unreachable(self, rank: int, error: ChannelError, timeout_s: float = 30.0) -> str:
        """Why rank `rank`'s channel closed: Ray's account of its actor (e.g. `ActorDiedError: ...`), else `error`."""
        try:
            ray.get(self.actors[rank].master_address.remote(), timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - the reason is reported, whatever it is
            return f"{type(exc).__name__}: {exc}"
        return f"{type(error).__name__}: {error}"

    def wait_all(self, refs: list[ray.ObjectRef], method: str, ranks: Optional[list[int]] = None) -> list[Any]:
        """The results of one call per rank (`refs` in rank order, or of the ranks `ranks` lists when only some were
        called), failing as soon as any rank fails: a method that raised re-raises its exception; a dead actor or
        node raises `WorkerGroupError` naming the rank.

        `ray.get(refs)` would wait for every rank first, and the ranks still alive may be blocked in a collective
        with the failed one (gloo / NCCL time out only after minutes): a dead actor or node would hang the run.
        """
        if ranks is not None and len(ranks) != len(refs):
            raise ValueError(f"ranks: {len(ranks)} ranks for {len(refs)} calls; expected the rank of each call")
        rank_of = dict(zip(refs, range(len(refs)) if ranks is None else ranks))
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayTaskError:
                    # a collective with a peer that just died fails at once: report the dead peer if there is one
                    self._raise_if_a_rank_died(pending, rank_of, method, timeout_s=self.dead_peer_grace_s)
                    raise  # the method raised, and no rank died: its own exception type and remote traceback
                except Exception as exc:  # the actor or its node died, or its result was lost
                    raise self._rank_died(rank_of[ref], self.world_size, method, exc) from exc
        return ray.get(refs)

    def _raise_if_a_rank_died(
        self, refs: list[ray.ObjectRef], rank_of: dict[ray.ObjectRef, int], method: str, timeout_s: float
    ) -> None:
        """Raise `WorkerGroupError` naming the first of `refs` whose actor (or node) died or whose result was lost
        within `timeout_s`; return when none did (a rank still running, or one whose method raised, is no death)."""
        deadline = time.monotonic() + timeout_s
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                return
            try:
                ray.get(ready[0])
            except ray.exceptions.RayTaskError:
                continue
            except Exception as exc:  # noqa: BLE001 - every other failure means the rank is gone
                raise self._rank_died(rank_of[ready[0]], self.world_size, method, exc) from exc

    def _rank_died(self, rank: int, world_size: int, method: str, exc: BaseException) -> WorkerGroupError:
        return WorkerGroupError(
            f"{self.role} rank {rank} of {world_size} failed in {method}: {type(exc).__name__}: {exc}"
        )

    def shutdown(self) -> None:
        """Release what outlives a killed process (a weight sender's shared memory), close the ranks' local channels
        (their sockets go with them) and kill the actors of this group."""
        senders = [actor for actor in self.actors if hasattr(actor, "close_weight_sender")]
        with contextlib.suppress(Exception):  # a dead rank's block is unlinked by the next run's sender instead
            ray.get([actor.close_weight_sender.remote() for actor in senders], timeout=10)
        if self._channel_state == "open":
            for channel in self._channels:
                channel.close()
            with contextlib.suppress(Exception):  # a rank that cannot answer is killed all the same
                ray.get([actor.close_channel.remote() for actor in self.actors], timeout=10)
        self._channel_state, self._channels = "ray", []
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []


def _on_wire(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of an actor call with their tensors as `TensorOnWire` (numpy on the wire)."""
    return {name: on_wire(value) for name, value in kwargs.items()}
