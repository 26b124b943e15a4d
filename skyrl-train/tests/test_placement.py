"""Placement without Ray: the actor environment, the CPUs a placement needs, how Ray is started or joined, and which
GPUs each engine actor sees under Ray's per-bundle assignment (simulated: `RayGpuSim`; placement groups themselves are
exercised by the Ray trainer tests)."""

import pytest

from skyrl_train.config import ConfigValidationError, SkyRLConfig, role_world_size
from skyrl_train.inference.vllm_engine import tensor_parallel_environment
from skyrl_train.placement import (
    RoleLayout,
    actor_env_vars,
    cpus_needed,
    engine_bundles,
    node_ordered_bundles,
    plan_placement,
    ray_init_kwargs,
    role_layout,
    vllm_tensor_parallel_layout,
)


def test_actors_default_to_no_openmp_spinning_and_user_values_win(monkeypatch):
    monkeypatch.delenv("KMP_BLOCKTIME", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    env = actor_env_vars()
    assert env["KMP_BLOCKTIME"] == "0" and env["TOKENIZERS_PARALLELISM"] == "false"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("KMP_BLOCKTIME", "50")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert actor_env_vars()["KMP_BLOCKTIME"] == "50" and actor_env_vars()["OMP_WAIT_POLICY"] == "ACTIVE"


def _cfg(*overrides):
    return SkyRLConfig.from_cli_overrides(["trainer.device=cpu", *overrides], validate=False)


def test_cpus_needed_follows_the_placement_keys():
    roles = ["policy", "ref", "critic"]
    colocated = _cfg("trainer.placement.policy_num_nodes=2", "trainer.placement.policy_num_gpus_per_node=3")
    assert cpus_needed(colocated, roles) == 6  # one shared bundle per policy worker: 2 nodes x 3
    separate = [
        "trainer.placement.colocate_all=false",
        "trainer.placement.policy_num_gpus_per_node=2",
        "trainer.placement.ref_num_nodes=2",
        "trainer.placement.ref_num_gpus_per_node=3",
        "trainer.placement.critic_num_nodes=1",
        "trainer.placement.critic_num_gpus_per_node=4",
        "generator.inference_engine.num_engines=5",
        "trainer.placement.num_cpus_per_worker=0.5",
    ]
    # ref shares the policy's bundles (colocate_policy_ref): policy 2 + critic 4 + engines 5 = 11 workers
    assert cpus_needed(_cfg(*separate), roles) == 11 * 0.5
    # ref on its own: + 2 x 3
    assert cpus_needed(_cfg(*separate, "trainer.placement.colocate_policy_ref=false"), roles) == 17 * 0.5


def test_ray_address_joins_a_cluster_instead_of_starting_one(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    local = ray_init_kwargs(_cfg(), ["policy"])
    assert "address" not in local and local["num_cpus"] >= 1
    joined = ray_init_kwargs(_cfg("trainer.placement.ray_address=ray://head:10001"), ["policy"])
    assert joined["address"] == "ray://head:10001" and "num_cpus" not in joined
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    assert ray_init_kwargs(_cfg(), ["policy"])["address"] == "auto"  # RAY_ADDRESS when the config has none
    assert ray_init_kwargs(_cfg("trainer.placement.ray_address=ray://h:1"), ["policy"])["address"] == "ray://h:1"


def test_a_separate_reward_model_adds_its_own_workers_to_the_cpus_needed():
    from skyrl_train.config import SkyRLConfig
    from skyrl_train.placement import cpus_needed

    overrides = [
        "trainer.placement.colocate_all=false",
        "trainer.placement.policy_num_gpus_per_node=2",
        "trainer.placement.reward_num_gpus_per_node=3",
        "trainer.placement.num_cpus_per_worker=2",
        "reward.model.path=rm",
    ]
    cfg = SkyRLConfig.from_cli_overrides(overrides, validate=False)
    # policy 2 + reward 3 + 1 engine workers, 2 CPUs each; the ref shares the policy's bundles
    assert cpus_needed(cfg, ["policy", "ref", "reward"]) == 2 * (2 + 3 + 1)
    colocated = SkyRLConfig.from_cli_overrides([*overrides[1:], "trainer.placement.colocate_all=true"], validate=False)
    assert cpus_needed(colocated, ["policy", "ref", "reward"]) == 2 * 2  # everyone shares the policy's bundles


def test_each_roles_nodes_and_gpus_per_node_give_its_workers_and_ray_strategy():
    cfg = _cfg(
        "trainer.placement.colocate_all=false",
        "trainer.placement.reward_num_nodes=2",
        "trainer.placement.reward_num_gpus_per_node=3",
        "trainer.placement.critic_num_gpus_per_node=4",
        "reward.model.path=rm",
    )
    reward = role_layout(cfg, "reward")
    assert reward == RoleLayout(nodes=2, per_node=3) and reward.workers == 6 and reward.strategy == "SPREAD"
    assert role_layout(cfg, "critic") == RoleLayout(nodes=1, per_node=4)
    assert role_layout(cfg, "critic").strategy == "STRICT_PACK"  # one node: all its bundles on one node
    for role in ("policy", "ref", "critic", "reward"):  # the worker groups and the checks count the same workers
        assert role_layout(cfg, role).workers == role_world_size(cfg, role)
    assert cpus_needed(cfg, ["policy", "reward"]) == 1 + 2 * 3 + 1  # policy + reward on 2 nodes x 3 + the engine
    with pytest.raises(ValueError, match="role 'engine' has no placement keys"):
        role_layout(cfg, "engine")


def test_an_allocation_mode_places_like_the_keys_it_expands_into():
    roles = ["policy", "ref"]
    separate = _cfg("trainer.placement.allocation_mode=vllm:d2+fsdp:d2")
    by_hand = _cfg(
        "trainer.placement.colocate_all=false",
        "trainer.placement.policy_num_gpus_per_node=2",
        "trainer.placement.ref_num_gpus_per_node=2",
        "generator.inference_engine.num_engines=2",
    )
    assert [role_layout(separate, role) for role in roles] == [role_layout(by_hand, role) for role in roles]
    assert cpus_needed(separate, roles) == cpus_needed(by_hand, roles) == 2 + 2  # the ref shares the policy's
    assert cpus_needed(_cfg("trainer.placement.allocation_mode=hf:d3|fsdp:d3"), roles) == 3  # all share 3 bundles
    assert cpus_needed(_cfg(), roles) == 1  # without it: the default one colocated worker


def test_thread_counts_below_one_are_refused_with_the_key():
    for key in ("trainer.placement.num_threads_per_worker", "generator.inference_engine.num_threads"):
        with pytest.raises(ConfigValidationError, match=key.replace(".", r"\.")):
            SkyRLConfig.from_cli_overrides(["trainer.device=cpu", f"{key}=0"])


@pytest.mark.integration
def test_a_placement_the_cluster_cannot_grant_fails_at_once_naming_what_is_missing(ray_cluster):
    """Bundles larger than the (one-node) session cluster, in total or each: refused before any waiting."""
    import ray

    from skyrl_train.placement import plan_placement

    have = int(ray.cluster_resources()["CPU"])
    half = have // 2 + 1  # two such bundles exceed the cluster, one fits
    cfg = _cfg(f"trainer.placement.num_cpus_per_worker={half}", "trainer.placement.policy_num_gpus_per_node=2")
    with pytest.raises(RuntimeError) as raised:
        plan_placement(cfg, ["policy"], timeout_s=600)  # no wait: the cluster can never grant it
    message = str(raised.value)
    assert message.startswith(f"placement of colocated roles: 2 bundle(s) of {{'CPU': {half}")
    assert f"CPU: needs {2 * half} in total, the cluster has {have}" in message
    big = _cfg(f"trainer.placement.num_cpus_per_worker={have + 1}", "trainer.placement.colocate_all=false")
    with pytest.raises(RuntimeError, match=f"placement of policy: .*one bundle needs {have + 1}, the largest node has"):
        plan_placement(big, ["policy"], timeout_s=600)


def test_a_submitted_job_driver_leaves_the_jobs_own_env_vars_to_the_job(monkeypatch):
    """Ray refuses a driver runtime env that repeats an env var key of the job's (`ray job submit`)."""
    import json

    monkeypatch.setenv(
        "RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"runtime_env": {"env_vars": {"HF_HUB_OFFLINE": "1"}}})
    )
    joined = ray_init_kwargs(_cfg("trainer.placement.ray_address=auto"), ["policy"])
    assert "HF_HUB_OFFLINE" not in joined["runtime_env"]["env_vars"]
    assert joined["runtime_env"]["env_vars"]["OMP_WAIT_POLICY"]  # ours, for every key the job leaves unset
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR")
    assert (
        "HF_HUB_OFFLINE"
        in ray_init_kwargs(_cfg("trainer.placement.ray_address=auto"), ["policy"])["runtime_env"]["env_vars"]
    )


def _sglang_local_gpu(tp_rank: int) -> int:
    """The local GPU SGLang 0.5.23 gives tensor-parallel worker `tp_rank` of a one-node engine (its
    `compute_local_gpu_id` with base GPU 0 and step 1)."""
    return tp_rank


def _tp2_cfg(backend: str, colocated: bool):
    return _cfg(
        "trainer.device=cuda",
        "trainer.policy.model.path=/m",
        f"trainer.placement.colocate_all={str(colocated).lower()}",
        "trainer.placement.policy_num_gpus_per_node=4",
        "trainer.placement.ref_num_gpus_per_node=4",
        "generator.inference_engine.num_engines=2",
        "generator.inference_engine.tensor_parallel_size=2",
        f"generator.inference_engine.backend={backend}",
    )


@pytest.mark.parametrize("colocated", [False, True])
def test_engine_tensor_parallelism_is_accepted_where_its_gpus_work_out(colocated):
    """M2: vllm TP > 1 passes in both placements (its ranks run as Ray workers in one-GPU bundles); a colocated sglang
    engine's actor sees one GPU, so sglang TP > 1 colocated is refused as not supported here."""
    _tp2_cfg("vllm", colocated).validate()
    if colocated:
        with pytest.raises(
            ConfigValidationError, match="backend=sglang and trainer.placement.colocate_all=true is not"
        ):
            _tp2_cfg("sglang", colocated).validate()


@pytest.mark.parametrize("colocated", [False, True])
def test_each_rank_of_a_tensor_parallel_vllm_engine_gets_a_gpu_of_its_own(ray_gpu_sim, monkeypatch, colocated):
    """M2: vllm TP=2, 2 engines, 4 policy GPUs. Every rank's Ray worker lands on its own GPU of one node, the actor on
    its rank 0's GPU, engines share no GPU, and colocated the policy and ref ranks still fit beside them."""
    cfg = _tp2_cfg("vllm", colocated)
    cfg.validate()
    sim = ray_gpu_sim({"node0": 8})
    sim.patch(monkeypatch)
    plan = plan_placement(cfg, ["policy", "ref"])
    slot = plan.slots["engine"]
    engine_group = sim.groups[-1]
    assert all(bundle.get("GPU") == 1 for bundle in engine_group["shapes"])  # vLLM's Ray executor takes no others
    assert len(engine_group["shapes"]) == (4 if colocated else 2 * 2)
    ranks_gpus = []
    for index in range(2):
        layout = vllm_tensor_parallel_layout(index, 2, slot.bundles, slot.num_gpus)
        actor = sim.place(slot.placement_group, layout.actor_bundle, layout.actor_gpus)
        workers = [sim.place(slot.placement_group, b, layout.worker_gpus) for b in layout.worker_bundles]
        assert actor == workers[0]  # the actor receives the weights on its rank 0's GPU
        assert len({node for node, _ in workers}) == 1 and len({gpus for _, gpus in workers}) == 2
        ranks_gpus += [gpus for _, gpus in workers]
        assert tensor_parallel_environment(2, layout.worker_bundles, layout.worker_gpus) == {
            "VLLM_RAY_BUNDLE_INDICES": ",".join(map(str, layout.worker_bundles)),
            "VLLM_RAY_PER_WORKER_GPUS": repr(layout.worker_gpus),
        }
    assert len(set(ranks_gpus)) == 4  # no two ranks of any engine on one GPU
    if colocated:  # policy and ref take their own shares of the same four bundles
        for role in ("policy", "ref"):
            role_slot = plan.slots[role]
            assert sorted(sim.place(role_slot.placement_group, b, role_slot.num_gpus)[1] for b in range(4)) == sorted(
                ranks_gpus
            )


def test_ranks_take_bundles_grouped_by_node_in_the_order_nodes_first_appear():
    assert node_ordered_bundles(["a", "b", "a", "b", "a", "b"]) == (0, 2, 4, 1, 3, 5)  # Ray's SPREAD deal
    assert node_ordered_bundles(["b", "a", "a", "b"]) == (0, 3, 1, 2)
    assert node_ordered_bundles(["a"] * 4) == (0, 1, 2, 3)  # one node: Ray's order, as before
    assert node_ordered_bundles([]) == ()


@pytest.mark.parametrize("per_node,tp", [(4, 2), (8, 16)])
def test_colocated_tensor_parallel_engines_on_two_nodes_follow_their_ranks(ray_gpu_sim, monkeypatch, per_node, tp):
    """Colocated on 2 nodes (bundles dealt round-robin, as Ray's SPREAD does): the ranks of one tensor-parallel engine
    sit on one node when tp divides the GPUs per node (4 per node, tp=2), and spread over both only when it cannot
    (SkyRL's 235B scripts: tp=16 on nodes of 8). Either way every rank has a GPU of its own, the actor sits on its
    rank 0's GPU, and the policy ranks share the engines' bundles in the same order."""
    workers = 2 * per_node
    cfg = _cfg(
        "trainer.device=cuda",
        "trainer.policy.model.path=/m",
        "trainer.placement.policy_num_nodes=2",
        f"trainer.placement.policy_num_gpus_per_node={per_node}",
        f"generator.inference_engine.num_engines={workers // tp}",
        f"generator.inference_engine.tensor_parallel_size={tp}",
        "generator.inference_engine.backend=vllm",
    )
    cfg.validate()
    sim = ray_gpu_sim({"node0": per_node, "node1": per_node})
    sim.patch(monkeypatch)
    plan = plan_placement(cfg, ["policy"])
    engine, policy = plan.slots["engine"], plan.slots["policy"]
    ranks = [sim.place(policy.placement_group, bundle, policy.num_gpus) for bundle in policy.bundles]
    assert [node for node, _ in ranks] == ["node0"] * per_node + ["node1"] * per_node
    seen = []
    for index in range(workers // tp):
        layout = vllm_tensor_parallel_layout(index, tp, engine.bundles, engine.num_gpus)
        actor = sim.place(engine.placement_group, layout.actor_bundle, layout.actor_gpus)
        placed = [sim.place(engine.placement_group, bundle, layout.worker_gpus) for bundle in layout.worker_bundles]
        assert actor == placed[0] == ranks[index * tp]
        assert placed == ranks[index * tp : (index + 1) * tp]
        assert len({node for node, _ in placed}) == (1 if per_node % tp == 0 else 2)
        seen += placed
    assert len(set(seen)) == workers


def test_tensor_parallel_layout_arithmetic_and_its_refusals():
    layout = vllm_tensor_parallel_layout(index=2, tensor_parallel_size=4, bundles=None, gpu_share=1 / 3)
    assert layout.actor_bundle == 8 and layout.worker_bundles == (8, 9, 10, 11)
    assert layout.actor_gpus == layout.worker_gpus == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="tensor_parallel_size >= 2, got 1"):
        vllm_tensor_parallel_layout(0, 1, None, 1.0)
    with pytest.raises(ValueError, match=r"share of a bundle must be in \(0, 1\], got 2"):
        vllm_tensor_parallel_layout(0, 2, None, 2)
    with pytest.raises(ValueError, match=r"engine 1 with tensor_parallel_size=2 needs bundles 2\.\.3 of .* 3"):
        vllm_tensor_parallel_layout(1, 2, (0, 2, 1), 1.0)
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 needs that many distinct .* got \[3, 3\]"):
        tensor_parallel_environment(2, (3, 3), 0.5)
    with pytest.raises(ValueError, match=r"got \[\]"):
        tensor_parallel_environment(2, (), 0.5)  # built outside create_engine_actors


def test_engine_bundles_and_cpus_follow_the_tensor_parallel_backend():
    separate = ["trainer.placement.colocate_all=false", "trainer.policy.model.path=/m"]
    vllm = _tp2_cfg("vllm", colocated=False)
    sglang = _tp2_cfg("sglang", colocated=False)
    assert engine_bundles(vllm) == (4, 1) and engine_bundles(sglang) == (2, 2)
    assert engine_bundles(_cfg(*separate, "generator.inference_engine.num_engines=3")) == (3, 0)  # CPU: no GPUs
    # policy 4 bundles (ref shares them) + 4 one-GPU engine bundles
    assert cpus_needed(vllm, ["policy", "ref"]) == 8 * vllm.trainer.placement.num_cpus_per_worker


def test_each_tensor_parallel_worker_of_a_separate_engine_sees_its_own_gpu(ray_gpu_sim, monkeypatch):
    """M2: a separate sglang engine with tensor_parallel_size=2 gets a bundle of 2 GPUs and its actor sees both
    (SGLang puts worker k on local GPU k); engines do not share GPUs."""
    cfg = _tp2_cfg("sglang", colocated=False)
    cfg.validate()
    sim = ray_gpu_sim({"node0": 8})
    sim.patch(monkeypatch)
    slot = plan_placement(cfg, ["policy"]).slots["engine"]
    seen = [sim.place(slot.placement_group, slot.bundles[index], slot.num_gpus)[1] for index in range(2)]
    assert [len(gpus) for gpus in seen] == [2, 2] and len({gpu for gpus in seen for gpu in gpus}) == 4
    for gpus in seen:
        assert all(_sglang_local_gpu(rank) < len(gpus) for rank in range(2))
