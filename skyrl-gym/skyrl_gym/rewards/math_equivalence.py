"""Decide whether a math answer equals the ground truth, and grade a whole response (`grade_math_response`).

The check runs cheapest first and stops at the first decisive step:

1. the cleaned answers are the same text (`\\dfrac12` and `\\frac{1}{2}`, `\\left(1,2\\right)` and `(1,2)`);
2. both are plain numbers (decimals, `a/b`, `\\frac{a}{b}`, percent): compared exactly as fractions;
3. math-verify (`math_verify.parse` / `verify`) parses both and compares them symbolically: sets, tuples,
   intervals, equations, expressions such as `x^2+2x+1` vs `(x+1)^2`;
4. if math-verify cannot parse either side, a restricted sympy parser and `simplify(a - b) == 0`.

Steps 3-4 are skipped (not equal) for answers nested deeper than `MAX_SYMBOLIC_NESTING`, and run under one
wall-clock deadline (`timeout_s`) that works in any thread; a timeout counts as "not equal". Parsed expressions
whose evaluation would need huge integers (`2^{10^{10}}`) are never evaluated.
"""

from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass
from typing import Any, Optional

from math_verify import parse as math_verify_parse
from math_verify import verify as math_verify_verify

from skyrl_gym.rewards.answer_extraction import MAX_ANSWER_CHARS, extract_boxed_answer, extract_final_answer
from skyrl_gym.rewards.deadline import DeadlineExceeded, run_with_deadline
from skyrl_gym.rewards.math_normalization import canonical_answer_text, clean_latex_answer, rational_values
from skyrl_gym.rewards.numbers import number_text
from skyrl_gym.rewards.sympy_fallback import is_too_large, sympy_equivalent

DEFAULT_TIMEOUT_S = 5.0
# math-verify's parser slows down exponentially with bare nested groups ("((((1))))": depth 10 takes ~1.5 s, 16
# takes minutes); real answers nest a few levels (3 for a tuple of fractions of roots), so deeper ones are
# compared as text only.
MAX_SYMBOLIC_NESTING = 6


class _DropDisabledTimeoutWarning(logging.Filter):
    """math-verify warns that its signal-based timeout is off; we pass None on purpose and bound time ourselves."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


for _logger_name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_logger_name).addFilter(_DropDisabledTimeoutWarning())


def nesting_depth(text: str) -> int:
    """The deepest nesting of (), [] and {} in `text` (unbalanced closers are ignored)."""
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}" and depth > 0:
            depth -= 1
    return deepest


def _math_verify_verdict(prediction: str, ground_truth: str) -> Optional[bool]:
    """math-verify's verdict, or None when it parses neither side into sympy or an expression is too large."""
    gold = math_verify_parse("\\boxed{" + ground_truth + "}", parsing_timeout=None)
    pred = math_verify_parse("\\boxed{" + prediction + "}", parsing_timeout=None)
    gold_expressions = [item for item in gold if not isinstance(item, str)]
    pred_expressions = [item for item in pred if not isinstance(item, str)]
    if not gold_expressions or not pred_expressions:
        return None
    if any(is_too_large(item) for item in gold_expressions + pred_expressions):
        return None
    return bool(math_verify_verify(gold, pred, timeout_seconds=None))


def _symbolic_equivalence(prediction: str, ground_truth: str) -> bool:
    """Steps 3-4 of the module docstring (math-verify, then the sympy fallback)."""
    verdict = _math_verify_verdict(prediction, ground_truth)
    if verdict is None:
        verdict = sympy_equivalent(prediction, ground_truth)
    return bool(verdict)


def is_equivalent(prediction: str, ground_truth: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when the predicted answer means the same as the ground truth (both LaTeX answer strings, unboxed)."""
    if not isinstance(prediction, str) or not isinstance(ground_truth, str):
        return False
    if len(prediction) > MAX_ANSWER_CHARS or len(ground_truth) > MAX_ANSWER_CHARS:
        return False
    pred_clean, gold_clean = clean_latex_answer(prediction), clean_latex_answer(ground_truth)
    if not pred_clean or not gold_clean:
        return False
    if canonical_answer_text(pred_clean) == canonical_answer_text(gold_clean):
        return True
    pred_values, gold_values = rational_values(pred_clean), rational_values(gold_clean)
    if pred_values and gold_values:
        return bool(pred_values & gold_values)
    if max(nesting_depth(pred_clean), nesting_depth(gold_clean)) > MAX_SYMBOLIC_NESTING:
        return False
    try:
        return run_with_deadline(_symbolic_equivalence, timeout_s, pred_clean, gold_clean)
    except DeadlineExceeded:
        return False


def _answer_text(value: Any, field: str) -> str:
    """One ground-truth answer as text: a number, or a string (its last `\\boxed{}` content if it has one)."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{field} must be an answer string or number (or a list of them), got {value!r}")
    number = number_text(value, field)
    if number is not None:
        return number
    if not isinstance(value, str):
        raise ValueError(f"{field} must be an answer string or number (or a list of them), got {type(value).__name__}")
    text = value.strip()
    if "\\boxed" in text or "\\fbox" in text:
        boxed = extract_boxed_answer(text)
        if boxed is None:
            raise ValueError(f"{field} has an unbalanced or oversized \\boxed{{}}: {value[:200]!r}")
        text = boxed
    if not text:
        raise ValueError(f"{field} must be a non-empty answer, got {value!r}")
    if len(text) > MAX_ANSWER_CHARS:
        raise ValueError(f"{field} is longer than {MAX_ANSWER_CHARS} characters; expected a final answer")
    return text


def parse_math_ground_truth(value: Any, field: str = "reward_spec.ground_truth") -> list[str]:
    """The accepted answers: one string/number, or a non-empty list of them (any one counts as correct).

    Raises ValueError naming `field` when the value is not usable.
    """
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"{field} is an empty list; expected at least one answer")
        return [_answer_text(item, f"{field}[{index}]") for index, item in enumerate(value)]
    return [_answer_text(value, field)]


def parse_aime_ground_truth(value: Any, field: str = "reward_spec.ground_truth") -> int:
    """An AIME answer: an integer 0-999, given as an int or a string such as "33", "033" or "\\boxed{33}"."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        number = int(value)
    else:
        text = _answer_text(value, field) if isinstance(value, str) else None
        if text is None or not text.isdigit():
            raise ValueError(f"{field} must be an AIME answer, an integer from 0 to 999, got {value!r}")
        number = int(text)
    if not 0 <= number <= 999:
        raise ValueError(f"{field} must be an AIME answer, an integer from 0 to 999, got {value!r}")
    return number


@dataclass(frozen=True)
class MathGrade:
    """The grade of one response: the extracted answer (`pred`, None if absent) and whether it is correct."""

    pred: Optional[str]
    correct: bool


def grade_math_response(response: str, ground_truths: list[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> MathGrade:
    """Extract the final answer of `response` and compare it with each accepted ground truth."""
    pred = extract_final_answer(response)
    if pred is None:
        return MathGrade(pred=None, correct=False)
    return MathGrade(pred=pred, correct=any(is_equivalent(pred, truth, timeout_s) for truth in ground_truths))
