"""Train on a simulated two-node Ray cluster (`ray.cluster_utils.Cluster`: two raylets on this machine, 2 CPUs
each) and print, per run, where every actor ran, which weight-sync transport each engine got, and the metrics.

Run by `test_two_nodes.py` in a child process, so the cluster never meets the test session's own Ray:

    python two_node_run.py MODEL_DIR DATA_DIR OUT_DIR   # prints one JSON object per run
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import tiny_config  # noqa: E402  (the trainer tests' tiny config)
from skyrl_train.entrypoints.main_base import BasePPOExp  # noqa: E402
from skyrl_train.weight_sync.node_aware import describe_weight_sync  # noqa: E402

RUNS = {
    # rank i and engine i share bundle i; two nodes asked for, so the bundles spread: engine 1 is on the other node
    "colocated": (
        True,
        [
            "trainer.placement.policy_num_nodes=2",
            "trainer.placement.policy_num_gpus_per_node=1",
            "trainer.max_training_steps=2",
        ],
    ),
    # both policy ranks fill one node; the engine can only go to the other
    "separate": (
        False,
        [
            "trainer.placement.num_cpus_per_worker=1",
            "trainer.placement.policy_num_gpus_per_node=2",
            "trainer.max_training_steps=1",
        ],
    ),
}


class WhereExp(BasePPOExp):
    """Records the weight-sync plan and the node of every worker and engine before the actors are released."""

    async def get_weight_sync(self, policy, engines):
        strategy = await super().get_weight_sync(policy, engines)
        self.sync_plan = describe_weight_sync(strategy)
        return strategy

    def shutdown(self) -> None:
        self.worker_nodes = [ray.get(actor.weight_sender_node_id.remote()) for actor in self.groups[0].actors]
        self.engine_nodes = [info["node_id"] for info in ray.get([e.handle.engine_info.remote() for e in self.engines])]
        super().shutdown()


def one_node_refusal(model_dir: str, data_dir: str, out_dir: str) -> str:
    """The error of a one-node role (2 ranks of 2 CPUs) that fits the cluster in total but no single node."""
    from skyrl_train.placement import plan_placement

    cfg = tiny_config(
        model_dir,
        Path(data_dir),
        Path(out_dir) / "refused",
        "trainer.placement.num_cpus_per_worker=2",
        "trainer.placement.policy_num_gpus_per_node=2",
        colocate=False,
    )
    try:
        plan_placement(cfg, ["policy"], timeout_s=600).remove()
    except RuntimeError as error:
        return str(error)
    return ""


@ray.remote(num_cpus=0)
def _node_of_this_actor() -> str:
    return ray.get_runtime_context().get_node_id()


def rank_nodes(model_dir: str, data_dir: str, out_dir: str) -> dict:
    """Where 4 colocated ranks (2 nodes x 2) land when each runs in its slot's bundle, next to Ray's own bundle
    order (`SPREAD` deals bundles round-robin over the nodes)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from skyrl_train.placement import bundle_nodes, plan_placement

    cfg = tiny_config(
        model_dir,
        Path(data_dir),
        Path(out_dir) / "rank_nodes",
        "trainer.placement.num_cpus_per_worker=1",
        "trainer.placement.policy_num_nodes=2",
        "trainer.placement.policy_num_gpus_per_node=2",
        "generator.inference_engine.num_engines=4",
    )
    plan = plan_placement(cfg, ["policy"], timeout_s=600)
    try:
        report = {"bundle_nodes": bundle_nodes(plan.groups[0])}
        for role in ("policy", "engine"):
            slot = plan.slots[role]
            strategies = [PlacementGroupSchedulingStrategy(slot.placement_group, bundle) for bundle in slot.bundles]
            calls = [_node_of_this_actor.options(scheduling_strategy=where).remote() for where in strategies]
            report[role] = ray.get(calls)
        return report
    finally:
        plan.remove()


def main(model_dir: str, data_dir: str, out_dir: str) -> None:
    """Start the two-node cluster, run each entry of RUNS on it, print what happened."""
    cluster = Cluster(initialize_head=True, connect=True, head_node_args={"num_cpus": 2})
    cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    try:
        nodes = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
        for name, (colocate, overrides) in RUNS.items():
            cfg = tiny_config(
                model_dir,
                Path(data_dir),
                Path(out_dir) / name,
                "generator.inference_engine.weight_sync_backend=auto",
                *overrides,
                colocate=colocate,
            )
            experiment = WhereExp(cfg, verify_weight_sync=True)
            result = experiment.run()
            print(
                json.dumps(
                    {
                        "run": name,
                        "nodes": nodes,
                        "worker_nodes": experiment.worker_nodes,
                        "engine_nodes": experiment.engine_nodes,
                        "sync_plan": experiment.sync_plan,
                        "global_step": result.global_step,
                        "verified": dict(result.history["weight_sync/verified_tensors"]),
                        "versions": dict(result.history["weight_sync/version"]),
                        "loss": dict(result.history["policy/loss"]),
                    }
                ),
                flush=True,
            )
        print(json.dumps({"run": "too_big_for_one_node", "error": one_node_refusal(model_dir, data_dir, out_dir)}))
        print(json.dumps({"run": "rank_nodes", **rank_nodes(model_dir, data_dir, out_dir)}))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:4])
