"""The arithmetic family: compute an integer expression like `12+7*3=`; reward 1 for the exact integer, else 0."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from numbers import Integral
from typing import Any

from skyrl_gym.envs.synthetic import base
from skyrl_gym.envs.synthetic.expressions import evaluate, parse_expression

MAX_ANSWER_CHARS = 64
_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class ArithmeticLevel:
    """What a difficulty means: how many operands, how many digits each may have, which operators appear."""

    operands: int
    digits: int
    operators: str


def arithmetic_level(difficulty: int) -> ArithmeticLevel:
    """Difficulty 1: two 1-digit operands with + -; each level adds a digit or an operand in turn; * from level 3.

    1: 2 x 1 digit (+-), 2: 2 x 2 digits (+-), 3: 3 x 2 digits (+-*), 4: 3 x 3 digits, 5: 4 x 3 digits, 6: 4 x 4, ...
    """
    base.check_difficulty(difficulty)
    return ArithmeticLevel(
        operands=2 + (difficulty - 1) // 2,
        digits=1 + difficulty // 2,
        operators="+-" if difficulty < 3 else "+-*",
    )


def make_problem(rng: random.Random, difficulty: int) -> base.Problem:
    """Draw one problem: operands uniform in [0, 10**digits), operators uniform; the question ends with `=`."""
    level = arithmetic_level(difficulty)
    operands = [rng.randrange(10**level.digits) for _ in range(level.operands)]
    operators = [rng.choice(level.operators) for _ in range(level.operands - 1)]
    expression = str(operands[0]) + "".join(op + str(number) for op, number in zip(operators, operands[1:]))
    answer = str(int(evaluate(parse_expression(expression, "+-*"))))
    return base.Problem(question=f"{expression}=", ground_truth=answer, answer=answer)


def count_problems(difficulty: int) -> int:
    """Exact number of distinct questions at a difficulty (every operand/operator sequence prints differently)."""
    level = arithmetic_level(difficulty)
    return 10 ** (level.digits * level.operands) * len(level.operators) ** (level.operands - 1)


def solve(question: str) -> str:
    """Answer a question such as `12+7*3=` by evaluating its expression."""
    return str(int(evaluate(parse_expression(question.strip().removesuffix("="), "+-*"))))


def parse_ground_truth(value: Any) -> int:
    """The integer ground truth; accepts an int or a string holding one (ValueError otherwise)."""
    if isinstance(value, Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()) and len(value.strip()) <= MAX_ANSWER_CHARS:
        return int(value.strip())
    raise base.ground_truth_error("arithmetic", "an integer or a string holding one, e.g. '42'", value)


def score_response(response: str, truth: int) -> base.Score:
    """1.0 when the answer is an integer equal to `truth`, else 0.0 (with the reason in the score)."""
    answer = base.extract_answer(response)
    unreadable = base.unreadable_answer(answer, _INTEGER, MAX_ANSWER_CHARS, "an integer", "integer")
    if unreadable is not None:
        return unreadable
    value = int(answer)
    return base.exact_verdict(answer, str(value), value == truth, truth)


class ArithmeticEnv(base.SyntheticEnv, family=__name__):
    """Env `arithmetic`: one turn; the response (or its last `<answer>` tag) must be the exact integer result."""


TASK = base.family_task(__name__, "integer expressions with + - * (answer: the integer)")
