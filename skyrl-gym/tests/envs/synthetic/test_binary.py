"""The binary family: the halving scratchpad, the difficulty dial, answer lengths and the exact-bits reward rule."""

import random
import statistics

import pytest

import skyrl_gym
from skyrl_gym.envs.synthetic import get_task
from skyrl_gym.envs.synthetic.binary import (
    binary_level,
    count_problems,
    make_problem,
    parse_ground_truth,
    score_response,
    solve,
    worked_answer,
)


def _problems(seed, difficulty, n=300):
    rng = random.Random(seed)
    return [make_problem(rng, difficulty) for _ in range(n)]


def test_the_scratchpad_halves_line_by_line_and_reads_the_bits_backwards():
    assert (
        worked_answer(45) == "45/2=22 r1\n22/2=11 r0\n11/2=5 r1\n5/2=2 r1\n2/2=1 r0\n1/2=0 r1\n<answer>101101</answer>"
    )
    assert worked_answer(1) == "1/2=0 r1\n<answer>1</answer>"
    for problem in _problems(3, 6, 50):
        number = int(problem["question"].split()[1])
        lines = problem["answer"].splitlines()
        assert len(lines) == number.bit_length() + 1
        assert problem["ground_truth"] == f"{number:b}" == lines[-1][len("<answer>") : -len("</answer>")]
        assert solve(problem["question"]) == problem["answer"]


def test_difficulty_sets_the_digit_range_and_difficulty_6_gives_100_to_300_token_answers():
    assert [(binary_level(d).min_digits, binary_level(d).max_digits) for d in (1, 3, 4, 6)] == [
        (1, 1),
        (1, 3),
        (1, 4),
        (3, 6),
    ]
    numbers = [int(p["question"].split()[1]) for p in _problems(0, 6)]
    assert min(numbers) >= 100 and max(numbers) <= 999_999
    assert {len(str(n)) for n in numbers} == {3, 4, 5, 6}
    lengths = [len(p["answer"]) for p in _problems(0, 6, 2000)]
    assert min(lengths) >= 90 and max(lengths) <= 320 and 180 <= statistics.mean(lengths) <= 240
    assert count_problems(6) == 999_900 and count_problems(1) == 9
    assert _problems(7, 6) == _problems(7, 6) and _problems(7, 6) != _problems(8, 6)


@pytest.mark.parametrize(
    "response, reward",
    [
        ("45/2=22 r1\n...\n<answer>101101</answer>", 1.0),
        ("101101", 1.0),
        ("<answer>101101</answer><|im_end|>", 1.0),
        ("<answer>101100</answer>", 0.0),
        ("<answer>0101101</answer>", 0.0),  # a leading zero is not the number's bits
        ("<answer>45</answer>", 0.0),
        ("", 0.0),
    ],
)
def test_only_the_exact_bits_score(response, reward):
    assert score_response(response, "101101").reward == reward


def test_malformed_ground_truth_is_refused_naming_the_field():
    for bad in ("0101", "12", "", 45, None):
        with pytest.raises(ValueError, match="reward_spec.ground_truth"):
            parse_ground_truth(bad)


def test_the_env_is_registered_and_scores_through_skyrl_gym():
    assert get_task("binary").env_class == "binary"
    env = skyrl_gym.make("binary", env_config={}, extras={"reward_spec": {"method": "rule", "ground_truth": "110"}})
    env.init([{"role": "user", "content": "Convert 6 to binary"}])
    output = env.step(worked_answer(6))
    assert output["reward"] == 1.0 and output["done"] and output["metadata"]["correct"]
