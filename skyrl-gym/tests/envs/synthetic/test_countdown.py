"""The countdown family: solvable generation, difficulty dial, solver, and the safe expression reward rule."""

import random
import re
import statistics

import numpy as np
import pytest

import skyrl_gym
from skyrl_gym.envs.synthetic import countdown
from skyrl_gym.envs.synthetic.countdown import (
    CountdownTruth,
    count_problems,
    countdown_level,
    find_solution,
    make_problem,
    parse_ground_truth,
    score_response,
    solve,
)

TRUTH = CountdownTruth(numbers=(3, 7, 25), target=46)


def _problems(seed, difficulty, n=200):
    rng = random.Random(seed)
    return [make_problem(rng, difficulty) for _ in range(n)]


@pytest.mark.parametrize("difficulty", [1, 2, 3, 4, 5])
def test_every_problem_is_solved_by_its_stored_solution_and_by_search(difficulty):
    level = countdown_level(difficulty)
    n = 150 if difficulty <= 4 else 40
    for problem in _problems(difficulty, difficulty, n):
        truth = parse_ground_truth(problem["ground_truth"])
        assert len(truth.numbers) == level.count and list(truth.numbers) == sorted(truth.numbers)
        assert 1 <= truth.target <= level.max_target and truth.target not in truth.numbers
        assert problem["question"] == f"Use {' '.join(map(str, truth.numbers))} to make {truth.target}"
        stored = score_response(problem["answer"], truth)
        assert stored.reward == 1.0, (problem, stored)
        assert sorted(countdown.literals(countdown.parse_expression(problem["answer"]))) == list(truth.numbers)
        assert score_response(solve(problem["question"]), truth).reward == 1.0


def test_difficulty_is_monotone_in_numbers_and_target():
    targets = [statistics.mean(p["ground_truth"]["target"] for p in _problems(0, d, 300)) for d in range(1, 6)]
    counts = [len(_problems(0, d, 1)[0]["ground_truth"]["numbers"]) for d in range(1, 6)]
    assert targets == sorted(targets) and len(set(targets)) == len(targets)
    assert counts == [2, 3, 4, 5, 6]


def test_division_appears_only_from_level_three():
    assert not any("/" in p["answer"] for p in _problems(0, 2, 500))
    assert any("/" in p["answer"] for p in _problems(0, 3, 500))


def test_distinct_counts_are_exact_for_small_levels():
    # difficulty 1 combines two numbers from 1..20 with + - *; by hand, {2, 3} ends at 5, 6 or 1
    assert countdown._final_values((2, 3), False) == frozenset({1, 5, 6})
    seen = {p["question"] for p in _problems(0, 1, 20_000)}
    assert len(seen) == count_problems(1) == 441
    assert count_problems(3) is None


def test_solver_hand_worked():
    assert find_solution([3, 7, 25], 46) is not None
    assert score_response(find_solution([3, 7, 25], 46), TRUTH).reward == 1.0
    assert find_solution([2, 2], 5) is None
    assert solve("Use 2 2 to make 5") == "2"  # fallback: a valid but wrong expression
    with pytest.raises(ValueError, match="not a countdown question"):
        solve("Reverse abc")


@pytest.mark.parametrize(
    "response",
    [
        "3*7+25",
        "25+3*7",
        "(25+7*3)",
        " 25 + 7 * 3 ",
        "<answer>25+7*3</answer>",
        "25+7*3<|im_end|>",
        "25+7*3 = 46",  # one claimed result is ignored
        "25+7*3=46",
    ],
)
def test_correct_expressions(response):
    score = score_response(response, TRUTH)
    assert score.reward == 1.0 and score.correct and score.parse_error is None
    assert score.details == {"value": "46", "target": 46}


def test_fractional_intermediates_are_exact():
    truth = CountdownTruth(numbers=(1, 3, 4, 6), target=24)
    assert score_response("6/(1-3/4)", truth).reward == 1.0  # 3/4 is not an integer; Fraction keeps it exact
    assert score_response("4*6", truth).reward == 1.0  # a subset of the numbers is enough


@pytest.mark.parametrize(
    "response, error",
    [
        ("__import__('os')", "Call is not allowed"),
        ("__import__('os').system('echo hacked')", "not allowed"),
        ("2**99999", r"operator \*\* is not allowed"),
        ("3**7", r"operator \*\* is not allowed"),
        ("9" * 300, "at most 200 are allowed"),
        ("99999999999999999999*3", "99999999999999999999 is not one of the given numbers"),
        ("25+7+7+3", "7 is used 2 times but given 1 time"),
        ("25+25-3-1", "25 is used 2 times"),
        ("46", "46 is not one of the given numbers"),
        ("25/(7-7)", "7 is used 2 times"),
        ("-3+25", "unary signs are not allowed"),
        ("3.0*7+25", "not a plain decimal integer literal"),
        ("25+7*3=46=46", "not a valid expression"),
        ("25+7*3 = forty-six", "not a valid expression"),
        ("", "empty"),
        ("<answer></answer>", "empty"),
        ("[3, 7, 25]", "List is not allowed"),
        ("open('/etc/passwd').read()", "not allowed"),
    ],
)
def test_invalid_expressions_score_zero_with_reason(response, error):
    score = score_response(response, TRUTH, format_reward=0.5)
    assert score.reward == 0.0 and not score.correct
    assert score.parse_error is not None and re.search(error, score.parse_error), score.parse_error


def test_division_by_zero_is_invalid_not_an_exception():
    truth = CountdownTruth(numbers=(3, 3, 5), target=8)
    score = score_response("5/(3-3)", truth, format_reward=0.5)
    assert score.reward == 0.0 and score.parse_error == "division by zero"


def test_format_reward_for_valid_wrong_expression():
    assert score_response("3+7+25", TRUTH).reward == 0.0
    score = score_response("3+7+25", TRUTH, format_reward=0.1)
    assert score.reward == 0.1 and not score.correct and score.parse_error is None
    assert score.details["value"] == "35" and "not the target 46" in score.reason
    assert score_response("25/3", TRUTH, format_reward=0.1).details["value"] == "25/3"


def test_env_config_and_ground_truth_forms():
    gt = {"numbers": [3, 7, 25], "target": 46}
    env = skyrl_gym.make("countdown", env_config={"format_reward": 0.2}, extras={"reward_spec": {"ground_truth": gt}})
    env.init([{"role": "user", "content": "Use 3 7 25 to make 46"}])
    assert env.step("3+7")["reward"] == 0.2
    with pytest.raises(ValueError, match="format_reward must be a number in"):
        skyrl_gym.make("countdown", env_config={"format_reward": 1.5})
    # parquet read through pandas gives numpy arrays and numpy ints; JSON text is accepted too
    numpy_form = {"numbers": np.array([3, 7, 25], dtype=np.int64), "target": np.int64(46)}
    assert parse_ground_truth(numpy_form) == TRUTH
    assert parse_ground_truth('{"numbers": [3, 7, 25], "target": 46}') == TRUTH


@pytest.mark.parametrize(
    "bad, field",
    [
        (46, "reward_spec.ground_truth must be"),
        ("not json", "reward_spec.ground_truth must be"),
        ({"numbers": [3, 7]}, "reward_spec.ground_truth must be"),
        ({"numbers": [], "target": 4}, r"ground_truth\['numbers'\] must be a non-empty list"),
        ({"numbers": [3, -1], "target": 4}, r"ground_truth\['numbers'\] must hold non-negative integers"),
        ({"numbers": [3, 2.5], "target": 4}, r"ground_truth\['numbers'\] must hold non-negative integers"),
        ({"numbers": [3, 4], "target": "7"}, r"ground_truth\['target'\] must be an integer"),
        ({"numbers": [3, 4], "target": True}, r"ground_truth\['target'\] must be an integer"),
    ],
)
def test_malformed_ground_truth(bad, field):
    env = skyrl_gym.make("countdown", env_config={}, extras={"reward_spec": {"method": "rule", "ground_truth": bad}})
    with pytest.raises(ValueError, match=field):
        env.init([{"role": "user", "content": "x"}])
