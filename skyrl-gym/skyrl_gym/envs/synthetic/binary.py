"""The binary family: write a decimal number in binary, showing the work; reward 1 for the exact bits, else 0.

The reference answer is a scratchpad of repeated halving, one line per bit, then the bits read from the last line to
the first::

    45/2=22 r1
    22/2=11 r0
    11/2=5 r1
    5/2=2 r1
    2/2=1 r0
    1/2=0 r1
    <answer>101101</answer>

Each line only halves the quotient of the line before (a digit-by-digit pass from the left) and notes the remainder,
so a small model can learn every step, while a whole answer takes 3.3 lines per decimal digit: 3- to 6-digit numbers
(difficulty 6) need about 95 to 320 characters, varying with the number. Only the `<answer>` tag is scored.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from skyrl_gym.envs.synthetic import base

_QUESTION = re.compile(r"\s*Convert ([0-9]+) to binary\s*")
_BITS = re.compile(r"1[01]*|0")
MAX_ANSWER_CHARS = 128


@dataclass(frozen=True)
class BinaryLevel:
    """What a difficulty means: the range of decimal digit counts of the number (drawn uniformly, then the number
    uniformly among those with that many digits)."""

    min_digits: int
    max_digits: int


def binary_level(difficulty: int) -> BinaryLevel:
    """Difficulty d: numbers of max(1, d - 3) to d decimal digits (6: 3 to 6 digits, 100 to 999999)."""
    base.check_difficulty(difficulty)
    return BinaryLevel(max(1, difficulty - 3), difficulty)


def format_question(number: int) -> str:
    """`Convert 45 to binary`."""
    return f"Convert {number} to binary"


def worked_answer(number: int) -> str:
    """The halving scratchpad of `number` followed by `<answer>bits</answer>` (see the module docstring)."""
    lines, quotient = [], number
    while True:
        lines.append(f"{quotient}/2={quotient // 2} r{quotient % 2}")
        quotient //= 2
        if quotient == 0:
            break
    return "\n".join(lines) + f"\n<answer>{number:b}</answer>"


def make_problem(rng: random.Random, difficulty: int) -> base.Problem:
    """Draw a digit count uniformly from the level's range, then the number uniformly among those digit counts
    (1-digit numbers start at 1)."""
    level = binary_level(difficulty)
    digits = rng.randint(level.min_digits, level.max_digits)
    number = rng.randint(1 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)
    return base.Problem(question=format_question(number), ground_truth=f"{number:b}", answer=worked_answer(number))


def count_problems(difficulty: int) -> int:
    """Exact number of distinct questions at a difficulty: every number with the level's digit counts."""
    level = binary_level(difficulty)
    return 10**level.max_digits - (1 if level.min_digits == 1 else 10 ** (level.min_digits - 1))


def solve(question: str) -> str:
    """The worked answer of `Convert 45 to binary`."""
    match = _QUESTION.fullmatch(question)
    if match is None:
        raise ValueError(f"not a binary question: {question!r}")
    return worked_answer(int(match.group(1)))


def parse_ground_truth(value: Any) -> str:
    """The expected bits: a string of 0s and 1s without leading zeros (ValueError otherwise)."""
    if isinstance(value, str) and _BITS.fullmatch(value):
        return value
    raise base.ground_truth_error("binary", "the number's bits without leading zeros, e.g. '101101'", value)


def score_response(response: str, truth: str) -> base.Score:
    """1.0 when the answer (the last `<answer>` tag, else the whole response) is exactly `truth`, else 0.0."""
    answer = base.extract_answer(response)
    if "<answer>" in answer:  # the worked answer wrapped in one more answer tag: its own tag holds the bits
        answer = answer.rsplit("<answer>", 1)[1].strip()
    unreadable = base.unreadable_answer(answer, _BITS, MAX_ANSWER_CHARS, "a binary number", "binary")
    if unreadable is not None:
        return unreadable
    return base.exact_verdict(answer, answer, answer == truth, truth)


class BinaryEnv(base.SyntheticEnv, family=__name__):
    """Env `binary`: one turn; the response's last `<answer>` tag (or the whole response) must be the number's bits."""


TASK = base.family_task(
    __name__, "write a decimal number in binary, showing the halving (answers of ~100-300 characters)"
)
