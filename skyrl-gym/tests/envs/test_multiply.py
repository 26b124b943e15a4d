"""The `multiply` env (SkyRL's example): a boxed product, feedback after a wrong turn, 0.5 for a boxed wrong final
answer."""

import pytest

import skyrl_gym


def make(max_turns=3, ground_truth="1443"):
    env = skyrl_gym.make("multiply", extras={"reward_spec": {"ground_truth": ground_truth}, "max_turns": max_turns})
    env.init([{"role": "user", "content": "37 * 39"}])
    return env


def test_a_right_answer_ends_the_episode_with_reward_1():
    env = make()
    first = env.step("37 * 39 = 1433, so \\boxed{1433}")
    assert (first["reward"], first["done"]) == (0.0, False)
    assert first["observations"] == [{"role": "user", "content": "Your answer '1433' is incorrect. Please try again."}]
    second = env.step("Let me redo it: 37 * 39 = 1443. \\boxed{ 1443 }")
    assert (second["reward"], second["done"], second["metadata"]["parsed_answer"]) == (1.0, True, "1443")
    assert env.get_metrics() == {"turns": 2, "episode_reward": 1.0, "solved": True}


def test_the_last_turn_earns_half_for_a_boxed_wrong_answer_and_nothing_without_one():
    env = make(max_turns=2)
    missing = env.step("it is about fourteen hundred")
    assert missing["observations"][0]["content"] == "Please give your answer in the form \\boxed{your_answer}."
    last = env.step("\\boxed{1442}")
    assert (last["reward"], last["done"], last["observations"]) == (0.5, True, [])
    unboxed = make(max_turns=1)
    assert unboxed.step("1443") == {
        "observations": [],
        "reward": 0.0,
        "done": True,
        "metadata": {"parsed_answer": None},
        "postprocessed_action": None,
    }


def test_ground_truth_compares_as_text_and_five_turns_is_the_default():
    env = skyrl_gym.make("multiply", extras={"reward_spec": {"ground_truth": 1443}})
    assert env.max_turns == 5
    env.init([])
    assert env.step("\\boxed{1443}")["reward"] == 1.0  # an int ground truth is compared as its text
    with pytest.raises(ValueError, match="needs extras\\['reward_spec'\\]\\['ground_truth'\\]"):
        skyrl_gym.make("multiply", extras={}).init([])
