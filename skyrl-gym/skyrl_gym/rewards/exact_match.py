"""Normalised exact match of a short answer against one or more target strings (SQuAD-style normalisation)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPACES = re.compile(r"\s+")


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, drop the articles a/an/the and collapse whitespace.

    Punctuation is every Unicode character of category P* (so curly quotes and dashes go too); it is removed, not
    replaced by a space, so "U.S.A." becomes "usa".
    """
    lowered = text.lower()
    no_punct = "".join(ch for ch in lowered if not unicodedata.category(ch).startswith("P"))
    no_articles = _ARTICLES.sub(" ", no_punct)
    return _SPACES.sub(" ", no_articles).strip()


def parse_targets(ground_truth: Any, field: str = "reward_spec.ground_truth") -> list[str]:
    """Return the target strings of a ground truth: a string, a list of strings, or {"target": str | [str]}.

    Sequences that are not lists (tuples, numpy arrays as read from parquet) are accepted too. Raises ValueError
    naming `field` when the ground truth has another shape, is empty, or has a target that normalises to nothing.
    """
    value = ground_truth
    where = field
    if isinstance(value, dict):
        if "target" not in value:
            raise ValueError(
                f"{field} is a dict without a 'target' key (keys: {sorted(value)}); expected {{'target': [...]}}"
            )
        value = value["target"]
        where = f"{field}.target"
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes, bytearray, list)):
        value = value.tolist()  # a numpy array (parquet list column) becomes a list (or a str for 0-d arrays)
    if isinstance(value, str):
        targets: list[Any] = [value]
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        targets = list(value)
    else:
        raise ValueError(
            f"{where} is {type(value).__name__} ({value!r}); expected a string, a list of strings or "
            "{'target': [strings]}"
        )
    if not targets:
        raise ValueError(f"{where} is an empty list; expected at least one target string")
    for index, target in enumerate(targets):
        if not isinstance(target, str):
            raise ValueError(f"{where}[{index}] is {type(target).__name__} ({target!r}); expected a string")
        if not normalize_answer(target):
            raise ValueError(f"{where}[{index}] is {target!r}, which is empty after normalisation; expected an answer")
    return targets


def exact_match(prediction: str | None, ground_truth: Any, field: str = "reward_spec.ground_truth") -> float:
    """1.0 when the normalised prediction equals any normalised target, else 0.0 (also for a missing prediction)."""
    targets = parse_targets(ground_truth, field)
    if prediction is None:
        return 0.0
    predicted = normalize_answer(prediction)
    return 1.0 if any(predicted == normalize_answer(target) for target in targets) else 0.0
