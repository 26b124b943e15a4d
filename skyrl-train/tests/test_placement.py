"""Tests for the environment every Ray actor gets and the CPUs a run needs (placement groups themselves are
exercised by the Ray trainer tests)."""

from skyrl_train.placement import actor_env_vars


def test_actors_default_to_no_openmp_spinning_and_user_values_win(monkeypatch):
    monkeypatch.delenv("KMP_BLOCKTIME", raising=False)
    env = actor_env_vars()
    assert env["KMP_BLOCKTIME"] == "0" and env["TOKENIZERS_PARALLELISM"] == "false"
    monkeypatch.setenv("KMP_BLOCKTIME", "50")
    assert actor_env_vars()["KMP_BLOCKTIME"] == "50"


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
