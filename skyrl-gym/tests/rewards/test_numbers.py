"""Tests for GSM8K number extraction, normalisation and the ground-truth reader (skyrl_gym.rewards.numbers)."""

from fractions import Fraction

import pytest

from skyrl_gym.rewards.numbers import (
    MAX_SCAN_CHARS,
    extract_flexible_answer,
    extract_gsm8k_answer,
    extract_strict_answer,
    normalize_number,
    numbers_match,
    parse_ground_truth_number,
)

READINGS = {
    normalize_number: [
        ("1,234", "1234"),
        ("$1,234", "1234"),
        ("$ 18", "18"),
        ("18.0", "18"),
        ("18.00", "18"),
        ("+7", "7"),
        ("-5", "-5"),
        ("-$5", "-5"),
        ("$-5", "-5"),
        (".5", "0.5"),
        ("3.50", "3.5"),
        ("1,234,567.125", "1234567.125"),
        ("42.", "42"),
        (" 7 ", "7"),
        *[(written, None) for written in ["", "abc", "1.2.3", "+-5", "--5", "12a", "$", "1" * 300]],
    ],
    # strict: the number after the last `####` marker, or nothing
    extract_strict_answer: [
        ("She has 3 apples.\n#### 1,234", "1234"),
        ("#### $18.00", "18"),
        ("####72", "72"),
        ("#### -3", "-3"),
        ("first #### 5 then corrected #### 6", "6"),
        ("#### 12 dollars", "12"),
        ("#### 0.5", "0.5"),
        *[(response, None) for response in ["The answer is 72.", "#### seventy-two", "####", "# 72", ""]],
    ],
    # flexible: the last number anywhere
    extract_flexible_answer: [
        ("3 + 4 = 7, so she pays $18.", "18"),
        ("The total is 1,234 dollars", "1234"),
        ("It drops by -4 degrees", "-4"),
        ("The date 2023-05 has 05 last", "5"),  # a hyphen glued to a number is not a sign
        ("Answer: 2.50 and nothing else", "2.5"),
        ("#### 9", "9"),
        ("no digits here at all", None),
    ],
    parse_ground_truth_number: [
        ("72", Fraction(72)),
        (72, Fraction(72)),
        (72.0, Fraction(72)),
        (0.1, Fraction(1, 10)),
        ("1,234", Fraction(1234)),
        ("Natalia sold 48/2 = 24 clips.\n#### 72", Fraction(72)),
        ("-3.5", Fraction(-7, 2)),
    ],
}
"""Each reader, what it is given and what it returns (None: no number); the conftest parametrizes the test below."""


def test_reader_returns_the_expected_value(reader, given, expected):
    assert reader(given) == expected


def test_mode_dispatch_and_unknown_mode():
    text = "7 apples\n#### 5 is wrong, it is 6"
    assert extract_gsm8k_answer(text, "strict") == "5"
    assert extract_gsm8k_answer(text, "flexible") == "6"
    with pytest.raises(ValueError, match="strict"):
        extract_gsm8k_answer(text, "lenient")


def test_only_the_tail_of_a_huge_response_is_scanned_quickly():
    huge = "1 " * 2_000_000 + "so #### 42"
    assert extract_strict_answer(huge) == "42"
    assert extract_flexible_answer(huge) == "42"
    # A marker older than the scan window is not seen.
    assert extract_strict_answer("#### 42 " + "x" * (MAX_SCAN_CHARS + 10)) is None


@pytest.mark.parametrize("bad", [None, True, "seventy", "", [72], {"answer": 72}, float("nan"), float("inf")])
def test_malformed_ground_truth_raises_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"reward_spec\.ground_truth"):
        parse_ground_truth_number(bad)


def test_numbers_match_is_numeric_not_textual():
    assert numbers_match("18.00", Fraction(18))
    assert numbers_match("1234", parse_ground_truth_number("1,234"))
    assert not numbers_match("12", Fraction(120))
    assert not numbers_match("120", Fraction(12))
    assert not numbers_match(None, Fraction(0))
    assert not numbers_match("0.5", Fraction(1, 3))
