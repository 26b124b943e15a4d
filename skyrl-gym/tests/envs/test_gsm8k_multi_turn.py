"""Tests for `gsm8k_multi_turn`: feedback messages, turn-level rewards, the turn limit and metrics."""

import pytest

import skyrl_gym
from skyrl_gym.envs.gsm8k import GSM8KMultiTurnEnv

PROMPT = [{"role": "user", "content": "What is 8 * 9?"}]


def _env(ground_truth="72", extras=None, **env_config):
    row = {"reward_spec": {"method": "rule", "ground_truth": ground_truth}, **(extras or {})}
    env = skyrl_gym.make("gsm8k_multi_turn", env_config=env_config, extras=row)
    env.init(PROMPT)
    return env


def test_registry_builds_the_class_with_five_turns_by_default():
    env = _env()
    assert isinstance(env, GSM8KMultiTurnEnv) and env.max_turns == 5
    assert env.format_reward == pytest.approx(0.2 / 5)


def test_correct_first_try():
    env = _env()
    out = env.step("8 * 9 = 72\n#### 72")
    assert out["reward"] == 1.0 and out["done"] is True and out["observations"] == []
    assert env.get_metrics() == {"turns": 1, "episode_reward": 1.0, "solved": True, "turns_used": 1}


def test_missing_answer_feedback_and_zero_reward():
    out = _env().step("I think it is seventy-two")
    assert out["reward"] == 0.0 and out["done"] is False
    (message,) = out["observations"]
    assert message["role"] == "user"
    assert "could not find a final answer" in message["content"] and "'#### <number>'" in message["content"]
    assert "4 turns left" in message["content"]


def test_wrong_answer_feedback_and_format_reward():
    out = _env().step("#### 71")
    assert out["reward"] == pytest.approx(0.04) and out["done"] is False
    content = out["observations"][0]["content"]
    assert "71 is incorrect" in content and "4 turns left" in content
    assert out["metadata"]["pred"] == "71" and out["metadata"]["found"] is True


def test_solved_on_a_later_turn_with_turn_level_rewards():
    env = _env()
    rewards = [env.step(text)["reward"] for text in ("no idea", "#### 70", "#### 72")]
    assert rewards == [0.0, pytest.approx(0.04), 1.0]
    metrics = env.get_metrics()
    assert metrics["solved"] is True and metrics["turns_used"] == 3
    assert metrics["episode_reward"] == pytest.approx(1.04)


def test_unsolved_episode_ends_at_max_turns():
    env = _env(extras={"max_turns": 2})
    first = env.step("#### 1")
    assert "1 turn left" in first["observations"][0]["content"]
    last = env.step("#### 2")
    assert last["done"] is True and last["observations"] == [] and last["metadata"]["truncated"] is True
    assert last["reward"] == pytest.approx(0.1)  # 0.2 / max_turns
    assert env.get_metrics() == {"turns": 2, "episode_reward": pytest.approx(0.2), "solved": False, "turns_used": 2}


def test_format_credit_never_beats_solving():
    env = _env()
    total = sum(env.step("#### 1")["reward"] for _ in range(5))
    assert total == pytest.approx(0.2) and total < 1.0


def test_configured_format_reward_and_flexible_mode():
    env = _env(format_reward=0.0, mode="flexible")
    out = env.step("the result is 70")
    assert out["reward"] == 0.0 and "70 is incorrect" in out["observations"][0]["content"]
    missing = env.step("no number")
    assert "give the final answer as a number" in missing["observations"][0]["content"]
    assert env.step("so 72")["reward"] == 1.0


def test_init_resets_the_episode():
    env = _env()
    env.step("#### 72")
    env.init(PROMPT)
    assert env.get_metrics() == {"turns": 0, "episode_reward": 0.0, "solved": False, "turns_used": 0}


def test_malformed_ground_truth_raises_naming_the_field():
    env = skyrl_gym.make("gsm8k_multi_turn", extras={"reward_spec": {"ground_truth": "a lot"}})
    with pytest.raises(ValueError, match=r"reward_spec\.ground_truth"):
        env.init(PROMPT)


def test_aggregate_metrics_averages_solved_and_turns():
    solved, unsolved = _env(), _env(extras={"max_turns": 2})
    solved.step("#### 72")
    unsolved.step("#### 0")
    unsolved.step("#### 0")
    summary = GSM8KMultiTurnEnv.aggregate_metrics([solved.get_metrics(), unsolved.get_metrics()])
    assert summary["solved"] == 0.5 and summary["turns_used"] == 1.5
