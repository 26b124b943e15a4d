"""Tests for math final-answer extraction: \\boxed{}/\\fbox{}, `Answer:` lines, end markers and bounded scans."""

import time

import pytest

from skyrl_gym.rewards.answer_extraction import (
    END_OF_TURN_MARKERS,
    MAX_ANSWER_CHARS,
    MAX_BRACE_DEPTH,
    extract_answer_line,
    extract_boxed_answer,
    extract_final_answer,
    strip_end_markers,
)

END_MARKED_SEVENS = [
    "\\boxed{7}<|im_end|>",
    "Answer: 7<|endoftext|>",
    "Answer: 7<|eot_id|>",
    "Answer: 7 <|eot_id|><|end_of_text|>\n",
    "Answer: 7</s>",
]
"""Answers of 7 followed by end-of-turn markers, which extraction strips."""


READINGS = {
    extract_boxed_answer: [
        ("so the answer is \\boxed{42}.", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\left\\{ 1, 2 \\right\\}}", "\\left\\{ 1, 2 \\right\\}"),  # escaped braces do not count
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\fbox{7}", "7"),
        ("\\boxed{1} and finally \\fbox{x^{2}}", "x^{2}"),
        ("$\\boxed {  3  }$", "3"),
        ("\\boxed 5", "5"),
        ("\\boxed{\\sqrt{\\frac{a}{b^{2}}}}", "\\sqrt{\\frac{a}{b^{2}}}"),
        ("\\boxed{2} then a broken \\boxed{3", "2"),  # an unbalanced last box falls back to the previous one
        ("\\boxed{}", None),
        ("no box here", None),
        ("\\boxedx{3}", None),
    ],
    extract_answer_line: [
        ("Reasoning...\nAnswer: 42", "42"),
        ("Answer: $\\frac{3}{4}$.", "\\frac{3}{4}"),
        ("**Final Answer:** 17", "17"),
        ("answer: 1\nsome more\nANSWER: 2", "2"),
        ("Answer:\n\n 12", "12"),
        ("Answer: \\(x+1\\)", "x+1"),
        ("Answer:", None),
        ("no final line", None),
    ],
    extract_final_answer: [
        ("\\boxed{5}\nAnswer: 6", "5"),  # a box wins over an answer line
        ("Answer: 6", "6"),
        ("I think it is probably seven.", None),
        ("Answer: 7<|im_end", "7<|im_end"),  # a mangled marker is not stripped
        *[(response, "7") for response in END_MARKED_SEVENS],
    ],
}
"""Each extractor, a response and what it extracts (None: no answer); the conftest parametrizes the test below."""


def test_extractor_returns_the_expected_answer(reader, given, expected):
    assert reader(given) == expected


def test_brace_depth_and_answer_length_are_bounded():
    ok = "\\boxed{" + "{" * (MAX_BRACE_DEPTH - 1) + "1" + "}" * (MAX_BRACE_DEPTH - 1) + "}"
    assert extract_boxed_answer(ok) is not None
    too_deep = "\\boxed{" + "{" * MAX_BRACE_DEPTH + "1" + "}" * MAX_BRACE_DEPTH + "}"
    assert extract_boxed_answer(too_deep) is None
    too_long = "\\boxed{" + "1" * (MAX_ANSWER_CHARS + 5) + "}"
    assert extract_boxed_answer(too_long) is None


def test_every_end_of_turn_marker_is_stripped_by_the_math_and_the_synthetic_envs():
    from skyrl_gym.envs.synthetic.base import extract_answer

    for marker in END_OF_TURN_MARKERS:
        assert strip_end_markers(f"Answer: 7{marker}") == "Answer: 7", marker
        assert extract_answer(f"<answer>7</answer>{marker}") == "7", marker
    assert {"<|im_end|>", "<eos>", "<end_of_turn>", "<｜end▁of▁sentence｜>"} <= set(END_OF_TURN_MARKERS)


def test_mangled_marker_is_not_stripped():
    assert strip_end_markers("Answer: 7<|im_end") == "Answer: 7<|im_end"


@pytest.mark.parametrize(
    "adversarial",
    [
        "\\boxed{" * 500_000,
        "{" * 2_000_000 + "}" * 2_000_000,
        "\\boxed{" + "{" * 100_000 + "1" + "}" * 100_000 + "}",
        "Answer:" + " " * 2_000_000 + "x",
        "\\\\" * 2_000_000,
        "7" + "<|im_end|>" * 500_000,
    ],
)
def test_adversarial_inputs_are_extracted_quickly(adversarial):
    start = time.perf_counter()
    extract_final_answer(adversarial)
    assert time.perf_counter() - start < 0.5
