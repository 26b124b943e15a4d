"""The addition family: generator, distinct-problem count, solver, env id and the exact-sum reward."""

import random

import pytest

import skyrl_gym
from skyrl_gym.envs.synthetic import TASKS
from skyrl_gym.envs.synthetic.addition import count_problems, make_problem, solve
from skyrl_gym.envs.synthetic.generate import generate_splits


def _problems(seed, difficulty, n=300):
    rng = random.Random(seed)
    return [make_problem(rng, difficulty) for _ in range(n)]


def test_operands_have_difficulty_digits_and_answer_is_their_sum():
    for difficulty in (1, 2, 3):
        for problem in _problems(0, difficulty):
            first, second = problem["question"].removesuffix("=").split("+")
            assert 0 <= int(first) < 10**difficulty and 0 <= int(second) < 10**difficulty
            assert problem["answer"] == problem["ground_truth"] == str(int(first) + int(second))
    # both ends of the 2-digit range occur (uniform operands)
    operands = {int(x) for p in _problems(1, 2, 3000) for x in p["question"].removesuffix("=").split("+")}
    assert min(operands) <= 2 and max(operands) >= 97


def test_count_and_solver():
    assert count_problems(1) == 100 and count_problems(2) == 10_000
    assert solve("58+65=") == "123" and solve(" 0+0= ") == "0"
    with pytest.raises(ValueError):
        solve("58-65=")  # only `+` belongs to this family
    with pytest.raises(ValueError):
        make_problem(random.Random(0), 0)


def test_env_scores_the_exact_sum():
    assert TASKS["addition"].env_class == "addition"
    extras = {"reward_spec": {"method": "rule", "ground_truth": "123"}}
    for response, reward in [("123", 1.0), ("<answer>123</answer>", 1.0), ("122", 0.0), ("", 0.0), ("abc", 0.0)]:
        env = skyrl_gym.make("addition", extras=extras)
        env.init([{"role": "user", "content": "58+65="}])
        assert env.step(response)["reward"] == reward, response


def test_splits_are_disjoint_and_capped_by_the_problem_count():
    splits = generate_splits("addition", train_size=900, test_size=100, difficulty=2, seed=0, progress=False)
    train = {row["extra_info"]["question"] for row in splits["train"]}
    test = {row["extra_info"]["question"] for row in splits["test"]}
    assert len(train) == 900 and len(test) == 100 and not train & test
    assert all(row["env_class"] == "addition" for row in splits["train"])
    with pytest.raises(ValueError, match="100 distinct problems"):
        generate_splits("addition", train_size=100, test_size=1, difficulty=1, seed=0, progress=False)
