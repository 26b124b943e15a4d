"""The MCP env's reward rule: a normalised answer match and required successful tool calls, all or a fraction."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation, localcontext
from typing import Any, Optional

_GROUND_TRUTH_KEYS = ("answer", "required_tools")
_SPACES = re.compile(r"\s+")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_GROUPED_NUMBER = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?")
_TRAILING_PUNCTUATION = ".,;:!"
_QUOTES = "\"'`"
_MAX_NUMBER_CHARS = 200


@dataclass(frozen=True)
class MCPGroundTruth:
    """What an episode must achieve: `answer` (None when not checked) and the tools it must call successfully."""

    answer: Optional[str]
    required_tools: tuple[str, ...]


def parse_ground_truth(raw: Any, field: str = "reward_spec.ground_truth") -> MCPGroundTruth:
    """Validate `{"answer": str, "required_tools": [names]}` (both optional, at least one given); raise ValueError
    naming the field and what was expected otherwise."""
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"{field} is {type(raw).__name__} ({raw!r}); expected a dict like "
            '{"answer": "42", "required_tools": ["calc__add"]}'
        )
    unknown = sorted(set(raw) - set(_GROUND_TRUTH_KEYS))
    if unknown:
        raise ValueError(f"{field} has unknown keys {unknown}; allowed keys are {list(_GROUND_TRUTH_KEYS)}")
    answer = raw.get("answer")
    if answer is not None:
        if isinstance(answer, int) and not isinstance(answer, bool):
            answer = str(answer)
        if not isinstance(answer, str) or not normalize_answer(answer):
            raise ValueError(f"{field}.answer is {answer!r}; expected a non-empty string (or an integer)")
    tools = raw.get("required_tools")
    if hasattr(tools, "tolist") and not isinstance(tools, (str, list)):
        tools = tools.tolist()  # a parquet list column arrives as a numpy array
    if tools is None:
        tools = []
    if isinstance(tools, str) or not isinstance(tools, Sequence) or not all(isinstance(t, str) and t for t in tools):
        raise ValueError(f"{field}.required_tools is {tools!r}; expected a list of tool names like ['calc__add']")
    if answer is None and not tools:
        raise ValueError(f"{field} gives neither 'answer' nor 'required_tools'; at least one condition is needed")
    return MCPGroundTruth(answer=answer, required_tools=tuple(dict.fromkeys(tools)))


def normalize_answer(text: str) -> str:
    """Canonical form of an answer: Unicode NFKC, case-folded, single spaces, without surrounding quotes or trailing
    `.,;:!`; a number becomes its exact decimal value (so "3.0", "3" and "3.00." agree, and "1,000" is 1000)."""
    text = _SPACES.sub(" ", unicodedata.normalize("NFKC", text)).strip()
    while True:
        previous = text
        text = text.rstrip(_TRAILING_PUNCTUATION).strip()
        if len(text) >= 2 and text[0] in _QUOTES and text[-1] == text[0]:
            text = text[1:-1].strip()
        if text == previous:
            break
    number = _canonical_number(text)
    return number if number is not None else text.casefold()


def _canonical_number(text: str) -> Optional[str]:
    if len(text) > _MAX_NUMBER_CHARS:
        return None
    if _GROUPED_NUMBER.fullmatch(text):
        text = text.replace(",", "")
    if not _NUMBER.fullmatch(text):
        return None
    try:
        with localcontext(Context(prec=_MAX_NUMBER_CHARS)):
            value = Decimal(text).normalize()
    except InvalidOperation:  # pragma: no cover - the regex admits only valid literals
        return None
    return "0" if value.is_zero() else str(value)


def answers_match(prediction: Optional[str], target: str) -> bool:
    """True when the prediction equals the target after `normalize_answer`; a missing prediction never matches."""
    return prediction is not None and normalize_answer(prediction) == normalize_answer(target)


def tool_was_called(required: str, successful_calls: Iterable[str]) -> bool:
    """True when a successful call matches `required`: a qualified name (`calc__add`) must match exactly, a bare
    name (`add`) matches that tool in any group."""
    for called in successful_calls:
        if called == required or ("__" not in required and called.split("__", 1)[-1] == required):
            return True
    return False


def score_episode(
    truth: MCPGroundTruth, answer: Optional[str], successful_calls: Iterable[str], partial_credit: bool = False
) -> tuple[float, dict[str, bool]]:
    """Return (reward, {condition: met}). Reward 1.0 iff every condition holds (else 0.0); with `partial_credit`, the
    fraction of conditions met (the answer counts as one condition and each required tool as one)."""
    called = list(successful_calls)
    met: dict[str, bool] = {}
    if truth.answer is not None:
        met["answer"] = answers_match(answer, truth.answer)
    for name in truth.required_tools:
        met[f"tool:{name}"] = tool_was_called(name, called)
    if partial_credit:
        return sum(met.values()) / len(met), met
    return (1.0 if all(met.values()) else 0.0), met
