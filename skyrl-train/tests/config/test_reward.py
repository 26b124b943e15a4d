"""The `reward` section: defaults keep today's behaviour, and inconsistent settings are refused naming the keys."""

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.validation import find_problems, role_world_size

BASE = [
    "trainer.placement.policy_num_gpus_per_node=2",
    "trainer.placement.ref_num_gpus_per_node=2",
    "generator.inference_engine.num_engines=2",
]
WITH_MODEL = ["reward.model.path=rm", "trainer.placement.reward_num_gpus_per_node=2"]


def problems_of(*overrides: str) -> list[str]:
    return find_problems(SkyRLConfig.from_cli_overrides([*BASE, *overrides], validate=False))


def test_defaults_use_the_env_rewards_and_no_reward_model():
    cfg = SkyRLConfig()
    assert (cfg.reward.manager, cfg.reward.function, cfg.reward.combine) == ("env", None, "by_row")
    assert cfg.needs_reward_model is False and cfg.reward.model.path is None
    assert SkyRLConfig.from_cli_overrides([*BASE, *WITH_MODEL]).needs_reward_model is True


def test_valid_combinations_pass():
    assert problems_of(*WITH_MODEL) == []
    assert problems_of(*WITH_MODEL, "reward.combine=sum", "reward.manager=naive", "reward.function=/f.py:fn") == []
    assert problems_of(*WITH_MODEL, "reward.combine=model") == []
    assert problems_of("reward.manager=parallel", "reward.function=pkg.mod:score") == []
    # separate placement: the reward model has its own workers, any count
    assert problems_of("reward.model.path=rm", "trainer.placement.colocate_all=false") == []


CASES = {
    "manager without function": (["reward.manager=naive"], "reward.manager=naive calls a user scoring function"),
    "function the env manager ignores": (["reward.function=/f.py:fn"], "reward.function is set but reward.manager=env"),
    "malformed function": (
        ["reward.manager=batch", "reward.function=just_a_name"],
        "reward.function='just_a_name' must look like 'package.module:name'",
    ),
    "sum without a model": (["reward.combine=sum"], "reward.combine=sum adds a reward model's score"),
    "model without a model": (["reward.combine=model"], "reward.combine=model adds a reward model's score"),
    "model combine ignores the manager": (
        [*WITH_MODEL, "reward.combine=model", "reward.manager=naive", "reward.function=/f.py:fn"],
        "reward.combine=model uses only the reward model's score, so reward.manager=naive would never be used",
    ),
    "sequence parallel": (
        [*WITH_MODEL, "reward.model.sequence_parallel_size=2"],
        "reward.model.sequence_parallel_size=2: sequence parallelism for the reward model is not supported here",
    ),
    "step-wise with a model": (
        [*WITH_MODEL, "generator.step_wise_trajectories=true"],
        "generator.step_wise_trajectories=true with reward.model.path is not supported here",
    ),
    "step-wise with a manager": (
        ["generator.step_wise_trajectories=true", "reward.manager=naive", "reward.function=/f.py:fn"],
        "generator.step_wise_trajectories=true with reward.manager=naive is not supported here",
    ),
    "colocated on more GPUs than the policy": (
        ["reward.model.path=rm", "trainer.placement.reward_num_gpus_per_node=3"],
        "colocate_all=true needs the reward on at most as many GPUs as the policy (3 vs 2)",
    ),
    "non-positive timeout": (["reward.timeout_s=0"], "reward.timeout_s must be positive, got 0"),
    "no scoring processes": (["reward.num_workers=0"], "reward.num_workers must be at least 1"),
    "no reward-model micro-batch": (["reward.model.micro_batch_size_per_gpu=0"], "micro_batch_size_per_gpu must be"),
    "no reward-model tokens": (["reward.model.max_length=0"], "reward.model.max_length must be at least 1"),
    "non-finite coefficient": (["reward.model_coef=nan"], "reward.model_coef must be a finite number"),
    "no reward nodes": (["trainer.placement.reward_num_nodes=0"], "trainer.placement.reward_num_nodes must be"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_inconsistency_is_refused_naming_its_keys(case):
    overrides, message = CASES[case]
    problems = problems_of(*overrides)
    assert any(message in problem for problem in problems), problems


def test_reward_workers_count_nodes_times_gpus():
    cfg = SkyRLConfig.from_cli_overrides(
        ["trainer.placement.reward_num_nodes=2", "trainer.placement.reward_num_gpus_per_node=3"], validate=False
    )
    assert role_world_size(cfg, "reward") == 6
