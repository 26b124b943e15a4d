"""Rewrite a LaTeX answer into a cleaner equivalent form and read plain numbers (with percent) out of it.

`clean_latex_answer` only makes meaning-preserving edits (\\dfrac -> \\frac, drop \\left/\\right, unwrap \\text{},
drop degree signs, dollar signs and unit words after a number); `canonical_answer_text` further removes all
whitespace for exact string comparison; `rational_values` reads "0.5", "1,234", "\\frac{1}{2}", "-3/4" or "50\\%"
as exact fractions (a percentage yields both readings, 50 and 1/2).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Optional

from skyrl_gym.rewards.numbers import parse_number

_TEXT_COMMANDS = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox|operatorname)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"\\[,!;:> ]|~|\\quad|\\qquad")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![a-zA-Z])\s*\.?")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree(?![a-zA-Z])|\\circ(?![a-zA-Z])")
_FRAC_SHORT = re.compile(r"\\frac\s*(\d)\s*(\d)")
_FRAC_HALF_SHORT = re.compile(r"\\frac\s*\{([^{}]*)\}\s*(\d)")
_SQRT_SHORT = re.compile(r"\\sqrt\s*(\d)")
_UNIT_WORDS = re.compile(r"^([-+]?[\d.,]+)\s*((?:[a-zA-Z]{2,}\.?\s*){1,3})$")
_MATH_WORDS = frozenset({"pi", "sqrt", "ln", "log", "sin", "cos", "tan", "exp", "infty", "infinity"})
_INT = r"[-+]?\d+"
_FRACTION = re.compile(rf"^([-+]?)\\frac\{{({_INT})\}}\{{({_INT})\}}$")
_SLASH = re.compile(rf"^({_INT})/({_INT})$")


def _strip_math_delimiters(text: str) -> str:
    """Remove one layer of surrounding `$...$`, `$$...$$`, `\\(...\\)` or `\\[...\\]`."""
    for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(opener) and text.endswith(closer) and len(text) >= len(opener) + len(closer):
            return text[len(opener) : len(text) - len(closer)].strip()
    return text


def clean_latex_answer(answer: str) -> str:
    """Meaning-preserving cleanup of a LaTeX answer (see the module docstring); the result is still LaTeX."""
    text = _strip_math_delimiters(answer.strip())
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\displaystyle", "")
    text = _LEFT_RIGHT.sub("", text)
    text = _SPACING.sub(" ", text)
    for _ in range(8):  # unwrap \text{...} and friends; innermost first, a bounded number of layers
        unwrapped = _TEXT_COMMANDS.sub(r"\1", text)
        if unwrapped == text:
            break
        text = unwrapped
    text = _DEGREES.sub("", text)
    text = text.replace("\\$", "").replace("$", "")
    text = re.sub(r"\s+", " ", text).strip()
    if text.endswith(".") and not text.endswith("..."):
        text = text[:-1].rstrip()
    match = _UNIT_WORDS.match(text)  # "5 cm", "12 square units" -> the number
    if (
        match
        and parse_number(match.group(1)) is not None
        and not _MATH_WORDS.intersection(word.rstrip(".").lower() for word in match.group(2).split())
    ):
        text = match.group(1)
    return text


def canonical_answer_text(answer: str) -> str:
    """The cleaned answer without any whitespace and with short forms expanded (\\frac12 -> \\frac{1}{2})."""
    text = clean_latex_answer(answer)
    text = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", text)
    text = _FRAC_HALF_SHORT.sub(r"\\frac{\1}{\2}", text)
    text = _SQRT_SHORT.sub(r"\\sqrt{\1}", text)
    text = re.sub(r"\s+", "", text)
    if text.startswith("+"):
        text = text[1:]
    return text


def _single_rational(text: str) -> Optional[Fraction]:
    """An exact fraction for a plain number, `\\frac{a}{b}` with integers, or `a/b`; None otherwise."""
    plain = parse_number(text)
    if plain is not None:
        return plain
    match = _FRACTION.match(text)
    if match:
        sign, numerator, denominator = match.groups()
        if int(denominator) == 0:
            return None
        value = Fraction(int(numerator), int(denominator))
        return -value if sign == "-" else value
    match = _SLASH.match(text)
    if match and int(match.group(2)) != 0:
        return Fraction(int(match.group(1)), int(match.group(2)))
    return None


def rational_values(answer: str) -> frozenset[Fraction]:
    """The exact values a plain-number answer can mean: {1/2} for "0.5", {50, 1/2} for "50\\%"; empty if symbolic."""
    text = canonical_answer_text(answer)
    if len(text) > 200:
        return frozenset()
    percent = text.endswith("\\%") or text.endswith("%")
    if percent:
        text = text[:-2] if text.endswith("\\%") else text[:-1]
    value = _single_rational(text)
    if value is None:
        return frozenset()
    return frozenset({value, value / 100}) if percent else frozenset({value})
