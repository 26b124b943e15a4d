"""The reverse family: generator, difficulty dial and the exact / partial-credit reward rule."""

import random
import statistics

import pytest

import skyrl_gym
from skyrl_gym.envs.synthetic import reverse
from skyrl_gym.envs.synthetic.reverse import count_problems, make_problem, reverse_level, score_response, solve


def _problems(seed, difficulty, n=200):
    rng = random.Random(seed)
    return [make_problem(rng, difficulty) for _ in range(n)]


def test_difficulty_grows_length_and_alphabet():
    lengths = [statistics.mean(len(p["answer"]) for p in _problems(0, d, 300)) for d in range(1, 7)]
    assert lengths == sorted(lengths) and len(set(lengths)) == len(lengths)
    sizes = [len(reverse_level(d).alphabet) for d in range(1, 7)]
    assert sizes == [5, 10, 26, 36, 62, 62]
    for problem in _problems(1, 1):
        text = problem["question"].removeprefix("Reverse ")
        assert 3 <= len(text) <= 5 and set(text) <= set("abcde")
        assert problem["ground_truth"] == text[::-1] == solve(problem["question"])
    assert count_problems(1) == 5**3 + 5**4 + 5**5


@pytest.mark.parametrize(
    "response, partial, reward",
    [
        ("edcba", False, 1.0),
        ("<answer>edcba</answer>", False, 1.0),
        ("edcba<|im_end|>", True, 1.0),
        ("abcde", False, 0.0),
        ("edcbx", False, 0.0),
        ("edcbx", True, 0.8),  # 4 of 5 positions right
        ("edc", True, 0.6),  # 3 of max(3, 5) positions
        ("edcbaedcba", True, 0.5),  # 5 of max(10, 5): padding does not help
        ("xedcb", True, 0.0),  # shifted: no position matches
        ("", True, 0.0),
        ("EDCBA", False, 0.0),  # case matters
    ],
)
def test_reward_rule(response, partial, reward):
    score = score_response(response, "edcba", partial_credit=partial)
    assert score.reward == pytest.approx(reward)
    assert score.correct is (reward == 1.0)


def test_empty_answer_is_reported_as_a_parse_error():
    assert score_response("<|im_end|>", "ab").parse_error == "empty answer"
    assert score_response("ba", "ab").parse_error is None


def test_env_partial_credit_option_and_its_validation():
    extras = {"reward_spec": {"method": "rule", "ground_truth": "cba"}}
    env = skyrl_gym.make("reverse", env_config={"partial_credit": True}, extras=extras)
    env.init([{"role": "user", "content": "Reverse abc"}])
    output = env.step("cbx")
    assert output["reward"] == pytest.approx(2 / 3) and output["metadata"]["position_credit"] == pytest.approx(2 / 3)
    plain = skyrl_gym.make("reverse", env_config={}, extras=extras)
    plain.init([{"role": "user", "content": "Reverse abc"}])
    assert plain.step("cbx")["reward"] == 0.0
    with pytest.raises(ValueError, match="partial_credit must be true or false"):
        skyrl_gym.make("reverse", env_config={"partial_credit": "yes"}, extras=extras)


@pytest.mark.parametrize("bad", ["", None, 12, ["a"]])
def test_malformed_ground_truth(bad):
    with pytest.raises(ValueError, match="reward_spec.ground_truth must be the non-empty expected string"):
        reverse.parse_ground_truth(bad)
