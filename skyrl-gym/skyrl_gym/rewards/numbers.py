"""GSM8K-style final-number extraction ("#### 1,234" or the last number in the text), normalisation and comparison.

Numbers are compared exactly as fractions after normalisation: thousands separators, a `$` sign, a leading `+`
and trailing zeros after the decimal point do not matter, so "#### $1,234.00" equals the ground truth 1234.
"""

from __future__ import annotations

import math
import numbers
import re
from fractions import Fraction
from typing import Any, Literal, Optional

MAX_SCAN_CHARS = 50_000  # the final answer sits at the end; only this many trailing characters are searched
ExtractionMode = Literal["strict", "flexible"]
EXTRACTION_MODES: tuple[str, ...] = ("strict", "flexible")

# A number as people write it in GSM8K answers: optional sign and dollar sign (either order), digits with
# optional comma thousands groups, optional decimals; or a bare decimal such as ".5".
_UNSIGNED = r"(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
_NUMBER = rf"(?:[-+]?\s?\$?\s?[-+]?{_UNSIGNED})"
_STRICT_ANSWER = re.compile(rf"####\s*({_NUMBER})")
# In running text a sign counts only when it is not glued to a preceding word or number ("2023-05" is 2023, 05).
_LOOSE_NUMBER = re.compile(rf"(?:(?<![\w)\]}}])[-+])?\$?{_UNSIGNED}")
_CANONICAL = re.compile(r"^([-+]?)(\d+(?:\.\d+)?|\.\d+)$")


def parse_number(text: str) -> Optional[Fraction]:
    """Parse a written number ("$1,234.50", "+7", "-.5", "18.0") into an exact Fraction; None if it is not one."""
    if not isinstance(text, str) or len(text) > 200:
        return None
    cleaned = text.strip().rstrip(".").replace(",", "").replace("$", "").replace(" ", "")
    match = _CANONICAL.match(cleaned)
    if match is None:
        # The sign may sit after the dollar sign ("$-5" -> "-5" already) or be doubled ("+-5"): reject the latter.
        return None
    sign, magnitude = match.groups()
    value = Fraction(magnitude)
    return -value if sign == "-" else value


def format_number(value: Fraction) -> str:
    """Render a Fraction from `parse_number` canonically: "1234", "-3.5", "0.125" (exact, no trailing zeros)."""
    if value.denominator == 1:
        return str(value.numerator)
    whole, remainder = divmod(abs(value.numerator), value.denominator)
    digits = []
    for _ in range(60):  # decimals written in text terminate; cap the loop for safety all the same
        if remainder == 0:
            break
        remainder *= 10
        digit, remainder = divmod(remainder, value.denominator)
        digits.append(str(digit))
    sign = "-" if value < 0 else ""
    return f"{sign}{whole}.{''.join(digits)}"


def normalize_number(text: str) -> Optional[str]:
    """Canonical text of a written number ("$1,234.00" -> "1234", "+.50" -> "0.5"); None if it is not a number."""
    value = parse_number(text)
    return None if value is None else format_number(value)


def _scan_window(text: str) -> str:
    """The last `MAX_SCAN_CHARS` characters, without the token the cut may have split."""
    if len(text) <= MAX_SCAN_CHARS:
        return text
    window = text[-MAX_SCAN_CHARS:]
    first_space = re.search(r"\s", window)
    return window[first_space.end() :] if first_space else ""


def extract_strict_answer(text: str) -> Optional[str]:
    """The number after the last `#### ` marker, normalised ("... #### 1,234" -> "1234"); None if absent."""
    last = None
    for match in _STRICT_ANSWER.finditer(_scan_window(text)):
        last = match
    return None if last is None else normalize_number(last.group(1))


def extract_flexible_answer(text: str) -> Optional[str]:
    """The last number anywhere in the text, normalised ("so she pays $18." -> "18"); None if there is none."""
    last = None
    for match in _LOOSE_NUMBER.finditer(_scan_window(text)):
        last = match
    return None if last is None else normalize_number(last.group(0))


def extract_gsm8k_answer(text: str, mode: ExtractionMode = "strict") -> Optional[str]:
    """Extract the final number with the given mode ("strict": after `####`; "flexible": the last number)."""
    if mode == "strict":
        return extract_strict_answer(text)
    if mode == "flexible":
        return extract_flexible_answer(text)
    raise ValueError(f"GSM8K extraction mode must be one of {EXTRACTION_MODES}, got {mode!r}")


def number_text(value: Any, field: str) -> Optional[str]:
    """A numeric ground truth as text: an int as its digits, a float as its shortest repr; None when `value` is not a
    number (bools count as not a number). Raises ValueError naming `field` for an infinite or NaN float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if not math.isfinite(float(value)):
        raise ValueError(f"{field} must be a finite number, got {value!r}")
    return repr(float(value))


def parse_ground_truth_number(value: Any, field: str = "reward_spec.ground_truth") -> Fraction:
    """Read a numeric ground truth: an int/float, or a string such as "72", "1,234" or a full "... #### 72" solution.

    Raises ValueError naming `field` when the value is not a finite number.
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{field} must be a number or a numeric string such as '72' or '#### 72', got {value!r}")
    number = number_text(value, field)
    if number is not None:
        return Fraction(number)  # via the shortest repr of a float, so 0.1 means one tenth
    if isinstance(value, str):
        text = value.rsplit("####", 1)[-1] if "####" in value else value
        parsed = parse_number(text)
        if parsed is not None:
            return parsed
    raise ValueError(f"{field} must be a number or a numeric string such as '72' or '#### 72', got {value!r}")


def numbers_match(prediction: Optional[str], ground_truth: Fraction) -> bool:
    """True when the written prediction equals the ground truth exactly as numbers ("18.00" matches 18)."""
    if prediction is None:
        return False
    value = parse_number(prediction)
    return value is not None and value == ground_truth
