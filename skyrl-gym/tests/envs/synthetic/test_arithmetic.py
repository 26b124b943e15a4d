"""The arithmetic family: generator, difficulty dial, solver and the integer reward rule."""

import random
import statistics

import pytest

import skyrl_gym
from skyrl_gym.envs.synthetic import arithmetic
from skyrl_gym.envs.synthetic.arithmetic import arithmetic_level, count_problems, make_problem, score_response, solve


def _problems(seed, difficulty, n=200):
    rng = random.Random(seed)
    return [make_problem(rng, difficulty) for _ in range(n)]


def test_levels_grow_one_dimension_at_a_time():
    assert arithmetic_level(1) == arithmetic.ArithmeticLevel(2, 1, "+-")
    assert arithmetic_level(2) == arithmetic.ArithmeticLevel(2, 2, "+-")
    assert arithmetic_level(3) == arithmetic.ArithmeticLevel(3, 2, "+-*")
    assert arithmetic_level(4) == arithmetic.ArithmeticLevel(3, 3, "+-*")
    assert arithmetic_level(5) == arithmetic.ArithmeticLevel(4, 3, "+-*")
    assert count_problems(1) == 10 * 10 * 2 and count_problems(3) == 100**3 * 9


def test_difficulty_is_monotone_in_answer_magnitude_and_question_length():
    magnitude = [statistics.mean(abs(int(p["answer"])) for p in _problems(0, d, 400)) for d in range(1, 7)]
    length = [statistics.mean(len(p["question"]) for p in _problems(0, d, 400)) for d in range(1, 7)]
    assert magnitude == sorted(magnitude) and len(set(magnitude)) == len(magnitude)
    assert length == sorted(length) and len(set(length)) == len(length)


def test_low_levels_use_no_multiplication_and_questions_are_well_formed():
    for problem in _problems(3, 2):
        assert "*" not in problem["question"] and problem["question"].endswith("=")
    assert any("*" in p["question"] for p in _problems(3, 3))
    for problem in _problems(4, 4):
        assert problem["ground_truth"] == problem["answer"] == solve(problem["question"])


def test_hand_worked_examples():
    assert solve("12+7*3=") == "33"
    assert solve("5-9=") == "-4"
    assert solve("2*3-4*5=") == "-14"


@pytest.mark.parametrize(
    "response, reward, parsed, error",
    [
        ("33", 1.0, "33", None),
        (" 33\n", 1.0, "33", None),
        ("+33", 1.0, "+33", None),
        ("<answer>33</answer>", 1.0, "33", None),
        ("33<|im_end|>", 1.0, "33", None),
        ("<answer>32</answer> no, <answer>33</answer>", 1.0, "33", None),
        ("32", 0.0, "32", None),
        ("-33", 0.0, "-33", None),
        ("033", 1.0, "033", None),  # leading zeros still name the integer 33
        ("33.0", 0.0, "33.0", "'33.0' is not an integer"),
        ("3 3", 0.0, "3 3", "'3 3' is not an integer"),
        ("thirty-three", 0.0, "thirty-three", "'thirty-three' is not an integer"),
        ("", 0.0, "", "empty answer"),
        ("9" * 100, 0.0, "9" * 64, "answer has 100 characters; at most 64 are read"),
    ],
)
def test_reward_rule(response, reward, parsed, error):
    score = score_response(response, 33)
    assert (score.reward, score.parsed_answer, score.parse_error) == (reward, parsed, error)
    assert score.correct is (reward == 1.0)


@pytest.mark.parametrize("truth, expected", [("33", 33), (" -7 ", -7), (12, 12)])
def test_ground_truth_accepts_ints_and_integer_strings(truth, expected):
    assert arithmetic.parse_ground_truth(truth) == expected


@pytest.mark.parametrize("bad", ["3.5", "abc", "", None, True, 3.0, ["3"]])
def test_malformed_ground_truth_raises_value_error_naming_the_field(bad):
    env = skyrl_gym.make("arithmetic", env_config={}, extras={"reward_spec": {"method": "rule", "ground_truth": bad}})
    with pytest.raises(ValueError, match=r"reward_spec.ground_truth must be an integer"):
        env.init([{"role": "user", "content": "1+1="}])


def test_env_plays_one_turn_with_reason_in_metadata():
    env = skyrl_gym.make("arithmetic", env_config={}, extras={"reward_spec": {"method": "rule", "ground_truth": "-4"}})
    env.init([{"role": "user", "content": "5-9="}])
    output = env.step("-5")
    assert output["reward"] == 0.0 and output["done"] is True
    assert output["metadata"]["reason"] == "-5 is wrong; expected -4"
