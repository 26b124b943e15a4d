"""The reverse family: write the given string backwards; exact match scores 1, with optional per-position credit."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any

from skyrl_gym.envs.synthetic import base

_ALPHABETS = (
    string.ascii_lowercase[:5],
    string.ascii_lowercase[:10],
    string.ascii_lowercase,
    string.ascii_lowercase + string.digits,
    string.ascii_letters + string.digits,
)
_PREFIX = "Reverse "


@dataclass(frozen=True)
class ReverseLevel:
    """What a difficulty means: the string length range and the alphabet its characters come from."""

    min_length: int
    max_length: int
    alphabet: str


def reverse_level(difficulty: int) -> ReverseLevel:
    """Length from d+2 to 2d+3; alphabet a-e (1), a-j (2), a-z (3), a-z0-9 (4), a-zA-Z0-9 (5 and up)."""
    base.check_difficulty(difficulty)
    return ReverseLevel(difficulty + 2, 2 * difficulty + 3, _ALPHABETS[min(difficulty, len(_ALPHABETS)) - 1])


def make_problem(rng: random.Random, difficulty: int) -> base.Problem:
    """Draw a length uniformly from the level's range, then each character uniformly from its alphabet."""
    level = reverse_level(difficulty)
    length = rng.randint(level.min_length, level.max_length)
    text = "".join(rng.choice(level.alphabet) for _ in range(length))
    return base.Problem(question=_PREFIX + text, ground_truth=text[::-1], answer=text[::-1])


def count_problems(difficulty: int) -> int:
    """Exact number of distinct strings (hence questions) at a difficulty."""
    level = reverse_level(difficulty)
    return sum(len(level.alphabet) ** n for n in range(level.min_length, level.max_length + 1))


def solve(question: str) -> str:
    """Answer `Reverse abc` with `cba`."""
    if not question.startswith(_PREFIX):
        raise ValueError(f"not a reverse question: {question!r}")
    return question[len(_PREFIX) :].strip()[::-1]


def parse_ground_truth(value: Any) -> str:
    """The expected (already reversed) string; must be a non-empty str."""
    if not isinstance(value, str) or not value:
        raise base.ground_truth_error("reverse", "the non-empty expected string (the input reversed)", value)
    return value


def position_credit(answer: str, truth: str) -> float:
    """Fraction of positions where `answer` matches `truth`, over the longer of the two lengths."""
    matches = sum(1 for a, b in zip(answer, truth) if a == b)
    return matches / max(len(answer), len(truth))


def score_response(response: str, truth: str, partial_credit: bool = False) -> base.Score:
    """1.0 for an exact match; otherwise `position_credit` if `partial_credit`, else 0.0."""
    answer = base.extract_answer(response)
    if answer == truth:
        return base.Score(1.0, True, answer, None, "exact match")
    credit = position_credit(answer, truth)
    details = {"position_credit": credit}
    reward = credit if partial_credit else 0.0
    parse_error = "empty answer" if not answer else None
    reason = f"expected {truth!r}; {credit:.0%} of positions match"
    return base.Score(reward, False, answer, parse_error, reason, details)


class ReverseEnv(base.SyntheticEnv, family=__name__):
    """Env `reverse`: one turn; the response (or its last `<answer>` tag) must be the question's string reversed.

    env_config: `partial_credit` (bool, default False) rewards a wrong answer with the fraction of positions right.
    """

    config_keys = ("partial_credit",)

    def read_score_options(self) -> dict[str, Any]:
        """`partial_credit`: true or false."""
        partial_credit = self.env_config.get("partial_credit", False)
        if not isinstance(partial_credit, bool):
            raise ValueError(f"reverse: env_config.partial_credit must be true or false; got {partial_credit!r}")
        return {"partial_credit": partial_credit}


TASK = base.family_task(__name__, "write the given string backwards")
