"""Tests for the single-turn `gsm8k` environment, made through the registry."""

import pytest

import skyrl_gym
from skyrl_gym import EnvStateError, guarded_step
from skyrl_gym.envs.gsm8k import GSM8KEnv

PROMPT = [{"role": "user", "content": "Natalia sold 48 clips in April and half as many in May. How many in total?"}]


def _env(ground_truth="72", **env_config):
    env = skyrl_gym.make(
        "gsm8k", env_config=env_config, extras={"reward_spec": {"method": "rule", "ground_truth": ground_truth}}
    )
    env.init(PROMPT)
    return env


def test_registry_builds_the_class():
    env = skyrl_gym.make("gsm8k", env_config={}, extras={"reward_spec": {"ground_truth": "72"}})
    assert isinstance(env, GSM8KEnv) and env.spec.id == "gsm8k"
    assert env.init(PROMPT) == (PROMPT, {})


def test_strict_correct_answer():
    out = _env().step("48 + 24 = 72\n#### 72")
    assert out["reward"] == 1.0 and out["done"] is True and out["observations"] == []
    assert out["metadata"] == {"pred": "72", "found": True, "correct": True}


@pytest.mark.parametrize("response", ["#### 72.00", "#### $72", "#### +72", "#### 72 clips"])
def test_strict_normalises_the_number(response):
    assert _env().step(response)["reward"] == 1.0


def test_thousands_separator_against_a_numeric_ground_truth():
    assert _env(1234).step("#### 1,234")["reward"] == 1.0
    assert _env("1,234").step("#### 1234")["reward"] == 1.0


def test_full_gsm8k_solution_as_ground_truth():
    solution = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n48+24 = <<48+24=72>>72\n#### 72"
    assert _env(solution).step("#### 72")["reward"] == 1.0


def test_strict_wrong_and_unformatted():
    wrong = _env().step("#### 71")
    assert wrong["reward"] == 0.0 and wrong["metadata"] == {"pred": "71", "found": True, "correct": False}
    unformatted = _env().step("The answer is 72.")
    assert unformatted["reward"] == 0.0 and unformatted["metadata"] == {"pred": None, "found": False, "correct": False}


def test_12_is_not_120():
    assert _env("120").step("#### 12")["reward"] == 0.0
    assert _env("12").step("#### 120")["reward"] == 0.0


def test_flexible_mode_reads_the_last_number():
    out = _env(mode="flexible").step("48 + 24 = 72 clips in total.")
    assert out["reward"] == 1.0 and out["metadata"]["pred"] == "72"
    assert _env(mode="flexible").step("72 is wrong, it is 73")["reward"] == 0.0


def test_format_reward_is_partial_credit_for_a_well_formed_wrong_answer():
    assert _env(format_reward=0.1).step("#### 71")["reward"] == pytest.approx(0.1)
    assert _env(format_reward=0.1).step("seventy-one")["reward"] == 0.0
    assert _env(format_reward=0.1).step("#### 72")["reward"] == 1.0


def test_single_turn_then_done():
    env = _env()
    env.step("#### 72")
    with pytest.raises(EnvStateError):
        env.step("#### 72")
    assert env.get_metrics() == {"turns": 1, "episode_reward": 1.0, "correct": True, "answer_found": True}


@pytest.mark.parametrize("bad", ["seventy-two", None, "", [72], True])
def test_malformed_ground_truth_raises_naming_the_field(bad):
    env = skyrl_gym.make("gsm8k", extras={"reward_spec": {"ground_truth": bad}})
    with pytest.raises(ValueError, match=r"reward_spec\.ground_truth"):
        env.init(PROMPT)


def test_missing_ground_truth_raises():
    env = skyrl_gym.make("gsm8k", extras={"reward_spec": {"method": "rule"}})
    with pytest.raises(ValueError, match="ground_truth"):
        env.init(PROMPT)


@pytest.mark.parametrize("config, field", [({"mode": "lenient"}, "mode"), ({"format_reward": "a"}, "format_reward")])
def test_bad_env_config_raises(config, field):
    with pytest.raises(ValueError, match=f"env_config.{field}"):
        skyrl_gym.make("gsm8k", env_config=config, extras={"reward_spec": {"ground_truth": "1"}})


def test_runs_under_guarded_step():
    out = guarded_step(_env(), "#### 72", timeout_s=5)
    assert out["reward"] == 1.0 and "env_error" not in out["metadata"]
