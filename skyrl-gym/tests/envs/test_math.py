"""Tests for the `math` and `aime` environments, made through the registry."""

import pytest

import skyrl_gym
from skyrl_gym import guarded_step
from skyrl_gym.envs.math import AIMEEnv, MathEnv

PROMPT = [{"role": "user", "content": "Compute 1/2 as a fraction. Put the final answer in \\boxed{}."}]


def _env(env_id, ground_truth, **env_config):
    env = skyrl_gym.make(
        env_id, env_config=env_config, extras={"reward_spec": {"method": "rule", "ground_truth": ground_truth}}
    )
    env.init(PROMPT)
    return env


def test_registry_builds_the_classes():
    assert type(_env("math", "1")) is MathEnv
    assert type(_env("aime", 1)) is AIMEEnv


@pytest.mark.parametrize(
    "response, ground_truth",
    [
        ("So the result is \\boxed{\\frac{1}{2}}.", "0.5"),
        ("\\boxed{0.5}<|im_end|>", "\\frac12"),
        ("Answer: 1/2<|eot_id|>", "\\dfrac{1}{2}"),
        ("\\fbox{\\left( 1, 2 \\right)}", "(1,2)"),
        ("\\boxed{(x+1)^2}", "x^2+2x+1"),
        ("\\boxed{\\{3, 1, 2\\}}", "\\{1,2,3\\}"),
        ("\\boxed{90^\\circ}", "90"),
        ("\\boxed{25\\%}", "0.25"),
        ("\\boxed{\\text{5 cm}}", "5"),
        ("the final answer is $\\boxed{\\frac{\\sqrt{3}}{2}}$", "The answer is \\boxed{\\frac{\\sqrt3}{2}}"),
    ],
)
def test_math_correct(response, ground_truth):
    out = _env("math", ground_truth).step(response)
    assert out["reward"] == 1.0 and out["done"] is True and out["metadata"]["acc"] is True


@pytest.mark.parametrize(
    "response, ground_truth, pred",
    [
        ("\\boxed{0.5}", "\\frac{1}{3}", "0.5"),
        ("\\boxed{12}", "120", "12"),
        ("I am not sure.", "7", None),
        ("\\boxed{[1,2]}", "(1,2]", "[1,2]"),
        ("Answer: 7<|im_end", "7", "7<|im_end"),  # a mangled end marker is not stripped
    ],
)
def test_math_wrong(response, ground_truth, pred):
    out = _env("math", ground_truth).step(response)
    assert out["reward"] == 0.0 and out["metadata"] == {"pred": pred, "acc": False}


def test_math_metrics_and_list_ground_truth():
    env = _env("math", ["1", "\\frac{2}{2}"])
    env.step("\\boxed{1.0}")
    assert env.get_metrics() == {"turns": 1, "episode_reward": 1.0, "acc": True, "answer_found": True}


@pytest.mark.parametrize("bad", ["", None, {"answer": "1"}, "\\boxed{1", []])
def test_math_malformed_ground_truth_raises_naming_the_field(bad):
    env = skyrl_gym.make("math", extras={"reward_spec": {"ground_truth": bad}})
    with pytest.raises(ValueError, match=r"reward_spec\.ground_truth"):
        env.init(PROMPT)


def test_math_adversarial_response_is_graded_quickly():
    env = _env("math", "5")
    out = guarded_step(env, "\\boxed{2^{10^{10}}}", timeout_s=10)
    assert out["reward"] == 0.0 and "env_error" not in out["metadata"]


@pytest.mark.parametrize(
    "response, ground_truth, reward",
    [
        ("\\boxed{33}", 33, 1.0),
        ("\\boxed{033}", "33", 1.0),
        ("Answer: 204<|endoftext|>", "204", 1.0),
        ("\\boxed{\\frac{66}{2}}", 33, 1.0),
        ("\\boxed{34}", 33, -1.0),
        ("no answer at all", 33, -1.0),
        ("\\boxed{0.5}", 0, -1.0),
    ],
)
def test_aime_rewards(response, ground_truth, reward):
    out = _env("aime", ground_truth).step(response)
    assert out["reward"] == reward and out["metadata"]["acc"] is (reward == 1.0)


def test_aime_configurable_rewards():
    assert _env("aime", 7, incorrect_reward=0.0).step("\\boxed{8}")["reward"] == 0.0
    assert _env("aime", 7, correct_reward=2.0).step("\\boxed{7}")["reward"] == 2.0


@pytest.mark.parametrize("bad", [1000, -3, "3.5", "\\frac{1}{2}", "x", True])
def test_aime_ground_truth_must_be_an_integer_0_to_999(bad):
    env = skyrl_gym.make("aime", extras={"reward_spec": {"ground_truth": bad}})
    with pytest.raises(ValueError, match=r"reward_spec\.ground_truth"):
        env.init(PROMPT)


@pytest.mark.parametrize(
    "config, field", [({"timeout_s": 0}, "timeout_s"), ({"incorrect_reward": "low"}, "incorrect_reward")]
)
def test_bad_env_config_raises(config, field):
    with pytest.raises(ValueError, match=f"env_config.{field}"):
        skyrl_gym.make("aime", env_config=config, extras={"reward_spec": {"ground_truth": 1}})
