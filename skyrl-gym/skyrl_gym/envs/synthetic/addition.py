"""The addition family: `a+b=` with two operands of `difficulty` digits each; reward 1 for the exact sum, else 0.

It is the narrowest arithmetic skill (no subtraction, no negative answers), which makes it the task on which the
embedded tiny model learns fastest: the CPU quickstart trains on 2-digit addition (difficulty 2, 10,000 problems).
Answers are scored exactly like the `arithmetic` family's.
"""

from __future__ import annotations

import random

from skyrl_gym.envs.synthetic.arithmetic import ArithmeticEnv
from skyrl_gym.envs.synthetic.base import Problem, check_difficulty, family_task
from skyrl_gym.envs.synthetic.expressions import evaluate, parse_expression


def make_problem(rng: random.Random, difficulty: int) -> Problem:
    """Draw `a+b=` with a and b uniform in [0, 10**difficulty); the ground truth is the sum as a string."""
    check_difficulty(difficulty)
    first, second = rng.randrange(10**difficulty), rng.randrange(10**difficulty)
    answer = str(first + second)
    return Problem(question=f"{first}+{second}=", ground_truth=answer, answer=answer)


def count_problems(difficulty: int) -> int:
    """Distinct questions at a difficulty: every ordered pair of operands, 10**(2 * difficulty)."""
    check_difficulty(difficulty)
    return 10 ** (2 * difficulty)


def solve(question: str) -> str:
    """Answer a question such as `12+7=` (only `+` is accepted)."""
    return str(int(evaluate(parse_expression(question.strip().removesuffix("="), "+"))))


class AdditionEnv(ArithmeticEnv):
    """Env `addition`: one turn; the response (or its last `<answer>` tag) must be the exact integer sum."""

    task_name = "addition"


TASK = family_task(__name__, "a+b with operands of `difficulty` digits (answer: the sum)")
