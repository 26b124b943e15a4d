"""The countdown family: write an expression over the given numbers (each at most once) that equals the target."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from itertools import combinations_with_replacement
from numbers import Integral
from typing import Any, NamedTuple, Optional

from skyrl_gym.envs.synthetic import base
from skyrl_gym.envs.synthetic.expressions import (
    ExpressionError,
    evaluate,
    format_fraction,
    literals,
    parse_expression,
)

_QUESTION = re.compile(r"\s*Use ((?:[0-9]+ )*[0-9]+) to make ([0-9]+)\s*")
_INTEGER = re.compile(r"\s*[+-]?[0-9]{1,64}\s*")
_MAX_ATTEMPTS = 10_000


@dataclass(frozen=True)
class CountdownLevel:
    """What a difficulty means: how many numbers, their range [1, max_number], the target range [1, max_target], and
    whether construction may divide."""

    count: int
    max_number: int
    max_target: int
    division: bool


_LEVELS = {
    1: CountdownLevel(2, 20, 50, False),
    2: CountdownLevel(3, 20, 100, False),
    3: CountdownLevel(4, 25, 200, True),
    4: CountdownLevel(5, 50, 500, True),
    5: CountdownLevel(6, 100, 1000, True),
}


def countdown_level(difficulty: int) -> CountdownLevel:
    """Difficulty 1: two numbers up to 20, target up to 50; each level adds a number and raises the ranges (table
    `_LEVELS`); beyond 5: d+1 numbers up to 100, target up to 1000*(d-4)."""
    base.check_difficulty(difficulty)
    if difficulty in _LEVELS:
        return _LEVELS[difficulty]
    return CountdownLevel(difficulty + 1, 100, 1000 * (difficulty - 4), True)


class CountdownTruth(NamedTuple):
    """The parsed ground truth: the given numbers and the target."""

    numbers: tuple[int, ...]
    target: int


class _Term(NamedTuple):
    value: int
    text: str
    precedence: int  # 3 literal, 2 for * /, 1 for + -


def _candidates(a: int, b: int, division: bool) -> list[tuple[int, str, bool]]:
    """Positive integer results of combining a and b: (value, operator, operands swapped)."""
    big, small, swapped = (a, b, False) if a >= b else (b, a, True)
    options = [(a + b, "+", False), (a * b, "*", False)]
    if big != small:
        options.append((big - small, "-", swapped))
    if division and small > 1 and big % small == 0:
        options.append((big // small, "/", swapped))
    return options


def _join(left: _Term, operator: str, right: _Term, value: int) -> _Term:
    """Print `left op right` with only the parentheses the exact (rational) value needs."""
    precedence = 1 if operator in "+-" else 2
    left_text = left.text if left.precedence >= precedence else f"({left.text})"
    right_ok = right.precedence > precedence or (right.precedence == precedence and operator in "+*")
    right_text = right.text if right_ok else f"({right.text})"
    return _Term(value, f"{left_text}{operator}{right_text}", precedence)


def _build(rng: random.Random, numbers: list[int], division: bool) -> _Term:
    """Combine random pairs with random operators until one term remains (every number is used once)."""
    pool = [_Term(n, str(n), 3) for n in numbers]
    rng.shuffle(pool)
    while len(pool) > 1:
        i, j = sorted(rng.sample(range(len(pool)), 2))
        second, first = pool.pop(j), pool.pop(i)
        value, operator, swapped = rng.choice(_candidates(first.value, second.value, division))
        left, right = (second, first) if swapped else (first, second)
        pool.append(_join(left, operator, right, value))
    return pool[0]


def format_question(numbers: list[int] | tuple[int, ...], target: int) -> str:
    """`Use 3 7 25 to make 46`."""
    return f"Use {' '.join(str(n) for n in numbers)} to make {target}"


def make_problem(rng: random.Random, difficulty: int) -> base.Problem:
    """Draw sorted numbers and build a random expression using all of them; its value (in range, not equal to any
    given number) is the target, so every problem is solvable. The reference answer is that expression."""
    level = countdown_level(difficulty)
    for _ in range(_MAX_ATTEMPTS):
        numbers = sorted(rng.randint(1, level.max_number) for _ in range(level.count))
        term = _build(rng, numbers, level.division)
        if 1 <= term.value <= level.max_target and term.value not in numbers:
            return base.Problem(
                question=format_question(numbers, term.value),
                ground_truth={"numbers": numbers, "target": term.value},
                answer=term.text,
            )
    raise RuntimeError(f"countdown: no in-range target after {_MAX_ATTEMPTS} attempts at difficulty {difficulty}")


@cache
def _final_values(pool: tuple[int, ...], division: bool) -> frozenset[int]:
    """Every value `_build` can end with from this sorted pool."""
    if len(pool) == 1:
        return frozenset(pool)
    values: set[int] = set()
    for i in range(len(pool)):
        for j in range(i + 1, len(pool)):
            rest = pool[:i] + pool[i + 1 : j] + pool[j + 1 :]
            for value, _, _ in _candidates(pool[i], pool[j], division):
                values |= _final_values(tuple(sorted(rest + (value,))), division)
    return frozenset(values)


def count_problems(difficulty: int) -> Optional[int]:
    """Exact number of distinct questions for difficulties 1-2 (by enumeration); None above (the space is large)."""
    level = countdown_level(difficulty)
    if difficulty > 2:
        return None
    total = 0
    for numbers in combinations_with_replacement(range(1, level.max_number + 1), level.count):
        targets = _final_values(numbers, level.division)
        total += sum(1 for t in targets if 1 <= t <= level.max_target and t not in numbers)
    return total


def find_solution(numbers: list[int] | tuple[int, ...], target: int) -> Optional[str]:
    """Search for an expression over `numbers` (each at most once) equal to `target`, combining pairs into positive
    integers as the generator does; None when there is none of that kind. Exponential: fine up to ~6 numbers."""
    start = [_Term(n, str(n), 3) for n in numbers]
    for term in start:
        if term.value == target:
            return term.text
    seen: set[tuple[int, ...]] = set()

    def search(pool: list[_Term]) -> Optional[str]:
        key = tuple(sorted(t.value for t in pool))
        if key in seen:
            return None
        seen.add(key)
        for i in range(len(pool)):
            for j in range(i + 1, len(pool)):
                rest = pool[:i] + pool[i + 1 : j] + pool[j + 1 :]
                for value, operator, swapped in _candidates(pool[i].value, pool[j].value, True):
                    left, right = (pool[j], pool[i]) if swapped else (pool[i], pool[j])
                    term = _join(left, operator, right, value)
                    if value == target:
                        return term.text
                    found = search(rest + [term]) if rest else None
                    if found:
                        return found
        return None

    return search(start)


def parse_question(question: str) -> tuple[list[int], int]:
    """The numbers and target of a question `Use 3 7 25 to make 46`."""
    match = _QUESTION.fullmatch(question)
    if not match:
        raise ValueError(f"not a countdown question: {question!r}")
    return [int(n) for n in match.group(1).split()], int(match.group(2))


def solve(question: str) -> str:
    """Answer a question by search (see `find_solution`); the first given number when nothing is found."""
    numbers, target = parse_question(question)
    return find_solution(numbers, target) or str(numbers[0])


def _as_int(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, Integral) and not isinstance(value, bool) else None


def parse_ground_truth(value: Any) -> CountdownTruth:
    """Accept `{"numbers": [non-negative ints], "target": int}` (or its JSON text; numpy arrays/ints from parquet are
    fine); raise ValueError naming the field otherwise."""
    expected = '{"numbers": [non-negative integers, at least one], "target": integer}'
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise base.ground_truth_error("countdown", expected, value) from None
    if not isinstance(value, dict) or "numbers" not in value or "target" not in value:
        raise base.ground_truth_error("countdown", expected, value)
    raw_numbers = value["numbers"]
    raw_numbers = raw_numbers.tolist() if hasattr(raw_numbers, "tolist") else raw_numbers
    if not isinstance(raw_numbers, (list, tuple)) or not raw_numbers:
        raise ValueError(
            f"countdown: reward_spec.ground_truth['numbers'] must be a non-empty list; got {raw_numbers!r}"
        )
    numbers = [_as_int(n) for n in raw_numbers]
    if any(n is None or n < 0 for n in numbers):
        raise ValueError(
            f"countdown: reward_spec.ground_truth['numbers'] must hold non-negative integers; got {raw_numbers!r}"
        )
    target = _as_int(value["target"])
    if target is None:
        raise ValueError(f"countdown: reward_spec.ground_truth['target'] must be an integer; got {value['target']!r}")
    return CountdownTruth(tuple(numbers), target)  # type: ignore[arg-type]


def _strip_claimed_result(answer: str) -> str:
    """`3*7+25 = 46` -> `3*7+25`: one trailing `= <integer>` is allowed and ignored."""
    if answer.count("=") == 1:
        expression, _, claimed = answer.partition("=")
        if _INTEGER.fullmatch(claimed):
            return expression
    return answer


def _number_misuse(used: list[int], given: tuple[int, ...]) -> Optional[str]:
    available = Counter(given)
    for number, times in Counter(used).items():
        if number not in available:
            return f"{number} is not one of the given numbers {list(given)}"
        if times > available[number]:
            return f"{number} is used {times} times but given {available[number]} time(s)"
    return None


def score_response(response: str, truth: CountdownTruth, format_reward: float = 0.0) -> base.Score:
    """1.0 when the answer is an allowed expression over the given numbers (each at most once) whose exact value is
    the target; `format_reward` for such an expression with another value; 0.0 for anything invalid."""
    answer = base.extract_answer(response)
    try:
        node = parse_expression(_strip_claimed_result(answer))
    except ExpressionError as exc:
        return base.Score(0.0, False, answer, str(exc), f"invalid expression: {exc}")
    misuse = _number_misuse(literals(node), truth.numbers)
    if misuse:
        return base.Score(0.0, False, answer, misuse, f"invalid expression: {misuse}")
    try:
        value = evaluate(node)
    except ExpressionError as exc:
        return base.Score(0.0, False, answer, str(exc), f"expression has no value: {exc}")
    details = {"value": format_fraction(value), "target": truth.target}
    if value == Fraction(truth.target):
        return base.Score(1.0, True, answer, None, f"expression equals the target {truth.target}", details)
    reason = f"valid expression equal to {format_fraction(value)}, not the target {truth.target}"
    return base.Score(float(format_reward), False, answer, None, reason, details)


class CountdownEnv(base.SyntheticEnv, family=__name__):
    """Env `countdown`: one turn; the response (or its last `<answer>` tag) is an expression over the given numbers.

    env_config: `format_reward` (float in [0, 1), default 0.0) is the reward for a valid expression with a wrong value.
    """

    config_keys = ("format_reward",)

    def read_score_options(self) -> dict[str, Any]:
        """`format_reward`: a number in [0, 1)."""
        format_reward = self.env_config.get("format_reward", 0.0)
        if isinstance(format_reward, bool) or not isinstance(format_reward, (int, float)) or not 0 <= format_reward < 1:
            raise ValueError(f"countdown: env_config.format_reward must be a number in [0, 1); got {format_reward!r}")
        return {"format_reward": float(format_reward)}


TASK = base.family_task(__name__, "reach the target with + - * / over the given numbers, each at most once")
