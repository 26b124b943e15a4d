"""`WorkerGroup`: the Ray actors of one role, created with a shared rendezvous, and helpers that dispatch to them."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Optional

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from skyrl_train.config.root import SkyRLConfig
from skyrl_train.training_batch import TrainingBatch, on_wire
from skyrl_train.utils.threads import actor_threads
from skyrl_train.workers.dispatch import ShardableBatch, data_parallel_ranks, join_results, shard_arguments

logger = logging.getLogger(__name__)


def role_model_parallel_size(cfg: Mapping[str, Any], role: str) -> int:
    """Ranks of `role` that hold one copy of the model: Megatron's tensor-parallel size on `trainer.strategy:
    megatron` (pipeline/context parallelism are refused by validation), else 1."""
    trainer = cfg.get("trainer", {})
    if trainer.get("strategy") != "megatron" or role not in ("policy", "ref"):
        return 1
    return int(trainer.get(role, {}).get("megatron", {}).get("tensor_model_parallel_size", 1))


class WorkerGroupError(RuntimeError):
    """A rank of a worker group is gone (its actor or node died, or its result was lost); names the role, rank and
    method."""


class WorkerGroup:
    """`num_workers` Ray actors of `worker_cls` forming one data-parallel (FSDP) group for `role`.

    Rank 0 is created first and picks the rendezvous address (its node IP and a free port); the other ranks join
    it. With a placement group, rank r runs in bundle `bundle_offset + r`. Each actor runs `num_threads` torch
    threads (default `max(1, int(num_cpus_per_worker))`).
    """

    def __init__(
        self,
        role: str,
        worker_cls: type,
        num_workers: int,
        cfg: SkyRLConfig | Mapping[str, Any],
        placement_group: Optional[Any] = None,
        bundle_offset: int = 0,
        num_cpus_per_worker: float = 1,
        num_gpus_per_worker: float = 0,
        num_threads: Optional[int] = None,
    ) -> None:
        if num_workers <= 0:
            raise ValueError(f"num_workers must be positive, got {num_workers}")
        self.role = role
        cfg_dict = cfg.to_dict() if isinstance(cfg, SkyRLConfig) else dict(cfg)
        self.model_parallel_size = role_model_parallel_size(cfg_dict, role)
        self.data_parallel_ranks = data_parallel_ranks(num_workers, self.model_parallel_size)
        remote_cls = ray.remote(worker_cls)
        threads = actor_threads(num_threads, num_cpus_per_worker)

        def actor_class(rank: int) -> Any:
            options: dict[str, Any] = {"num_cpus": num_cpus_per_worker, "num_gpus": num_gpus_per_worker}
            if placement_group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=placement_group, placement_group_bundle_index=bundle_offset + rank
                )
            return remote_cls.options(**options)

        rank0 = actor_class(0).remote(role, 0, num_workers, None, None, cfg_dict, threads)
        master_addr, master_port = ray.get(rank0.master_address.remote())
        self.actors = [rank0] + [
            actor_class(rank).remote(role, rank, num_workers, master_addr, master_port, cfg_dict, threads)
            for rank in range(1, num_workers)
        ]
        logger.info("%s group: %d workers rendezvous at %s:%d", role, num_workers, master_addr, master_port)

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
        shards = shard_arguments(batch, self.world_size // self.model_parallel_size, kwargs)
        refs = [
            getattr(actor, method).remote(shards[dp][0], **_on_wire(shards[dp][1]))
            for actor, dp in zip(self.actors, self.data_parallel_ranks)
        ]
        results = self.wait_all(refs, method)
        return join_results(results[:: self.model_parallel_size], len(batch))

    def run_sharded_each(
        self, method: str, calls: list[tuple[TrainingBatch | ShardableBatch, dict[str, Any]]], **kwargs: Any
    ) -> list[Any]:
        """Several sharded calls in one round trip per rank: each `(batch, batch_kwargs)` of `calls` is split as
        `run_sharded` splits it, and each rank gets all its shards at once, `method([(shard, shard_kwargs), ...],
        **kwargs)`, which returns one result per shard. Returns the joined result of each call, in order."""
        num_shards = self.world_size // self.model_parallel_size
        sharded = [
            [
                (shard, _on_wire(shard_kwargs))
                for shard, shard_kwargs in shard_arguments(batch, num_shards, batch_kwargs)
            ]
            for batch, batch_kwargs in calls
        ]
        refs = [
            getattr(actor, method).remote([shards[dp] for shards in sharded], **kwargs)
            for actor, dp in zip(self.actors, self.data_parallel_ranks)
        ]
        per_rank = self.wait_all(refs, method)[:: self.model_parallel_size]
        for rank, results in enumerate(per_rank):
            if len(results) != len(calls):
                raise RuntimeError(
                    f"{self.role} {method} returned {len(results)} results on data-parallel rank {rank}; expected one "
                    f"per call ({len(calls)})"
                )
        return [
            join_results([results[position] for results in per_rank], len(batch))
            for position, (batch, _) in enumerate(calls)
        ]

    def wait_all(self, refs: list[ray.ObjectRef], method: str) -> list[Any]:
        """The results of one call per rank (`refs` in rank order), failing as soon as any rank fails: a method
        that raised re-raises its exception; a dead actor or node raises `WorkerGroupError` naming the rank.

        `ray.get(refs)` would wait for every rank first, and the ranks still alive may be blocked in a collective
        with the failed one (gloo / NCCL time out only after minutes): a dead actor or node would hang the run.
        """
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayTaskError:
                    raise  # the method raised: its own exception type (and Ray's remote traceback), at once
                except Exception as exc:  # the actor or its node died, or its result was lost
                    raise WorkerGroupError(
                        f"{self.role} rank {rank_of[ref]} of {len(refs)} failed in {method}: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
        return ray.get(refs)

    def shutdown(self) -> None:
        """Kill the actors of this group."""
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []


def _on_wire(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of an actor call with their tensors as `TensorOnWire` (numpy on the wire)."""
    return {name: on_wire(value) for name, value in kwargs.items()}
