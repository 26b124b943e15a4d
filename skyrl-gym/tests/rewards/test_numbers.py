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


@pytest.mark.parametrize(
    "written, canonical",
    [
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
    ],
)
def test_normalize_number_canonical_forms(written, canonical):
    assert normalize_number(written) == canonical


@pytest.mark.parametrize("written", ["", "abc", "1.2.3", "+-5", "--5", "12a", "$", "1" * 300])
def test_normalize_number_rejects_non_numbers(written):
    assert normalize_number(written) is None


@pytest.mark.parametrize(
    "response, expected",
    [
        ("She has 3 apples.\n#### 1,234", "1234"),
        ("#### $18.00", "18"),
        ("####72", "72"),
        ("#### -3", "-3"),
        ("first #### 5 then corrected #### 6", "6"),
        ("#### 12 dollars", "12"),
        ("#### 0.5", "0.5"),
    ],
)
def test_strict_reads_the_number_after_the_last_marker(response, expected):
    assert extract_strict_answer(response) == expected


@pytest.mark.parametrize("response", ["The answer is 72.", "#### seventy-two", "####", "# 72", ""])
def test_strict_finds_nothing_without_a_marked_number(response):
    assert extract_strict_answer(response) is None


@pytest.mark.parametrize(
    "response, expected",
    [
        ("3 + 4 = 7, so she pays $18.", "18"),
        ("The total is 1,234 dollars", "1234"),
        ("It drops by -4 degrees", "-4"),
        ("The date 2023-05 has 05 last", "5"),  # a hyphen glued to a number is not a sign
        ("Answer: 2.50 and nothing else", "2.5"),
        ("#### 9", "9"),
    ],
)
def test_flexible_reads_the_last_number(response, expected):
    assert extract_flexible_answer(response) == expected


def test_flexible_finds_nothing_without_digits():
    assert extract_flexible_answer("no digits here at all") is None


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


@pytest.mark.parametrize(
    "ground_truth, value",
    [
        ("72", Fraction(72)),
        (72, Fraction(72)),
        (72.0, Fraction(72)),
        (0.1, Fraction(1, 10)),
        ("1,234", Fraction(1234)),
        ("Natalia sold 48/2 = 24 clips.\n#### 72", Fraction(72)),
        ("-3.5", Fraction(-7, 2)),
    ],
)
def test_ground_truth_reader(ground_truth, value):
    assert parse_ground_truth_number(ground_truth) == value


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
