"""The ast-based expression checker and exact evaluator used by arithmetic and countdown."""

from fractions import Fraction

import pytest

from skyrl_gym.envs.synthetic.expressions import (
    ExpressionError,
    evaluate,
    format_fraction,
    literals,
    parse_expression,
)


@pytest.mark.parametrize(
    "text, value",
    [
        ("1+2*3", Fraction(7)),
        ("(1+2)*3", Fraction(9)),
        ("7/2", Fraction(7, 2)),
        ("8-3-2", Fraction(3)),
        ("2*3/4", Fraction(3, 2)),
        (" ( 4 ) ", Fraction(4)),
        ("1/3+1/3+1/3", Fraction(1)),
    ],
)
def test_evaluate_exact_rationals(text, value):
    assert evaluate(parse_expression(text)) == value


@pytest.mark.parametrize(
    "text, reason",
    [
        ("__import__('os')", "Call is not allowed"),
        ("2**99999", r"operator \*\* is not allowed"),
        ("7//2", r"operator // is not allowed"),
        ("7%2", "operator % is not allowed"),
        ("-3+5", "unary signs are not allowed"),
        ("1.5*2", "not a plain decimal integer literal"),
        ("1e3", "not a plain decimal integer literal"),
        ("0x10", "not a plain decimal integer literal"),
        ("1_000", "not a plain decimal integer literal"),
        ("True+1", "not a plain decimal integer literal"),
        ("x+1", "Name is not allowed"),
        ("(1,2)", "Tuple is not allowed"),
        ("1 if 1 else 2", "IfExp is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("1+", "not a valid expression"),
        ("07", "not a valid expression"),
        ("", "empty"),
        ("1+" * 150 + "1", "at most 200 are allowed"),
        ("9" * 5000, "at most 200 are allowed"),
    ],
)
def test_rejects_everything_but_integers_and_four_operators(text, reason):
    with pytest.raises(ExpressionError, match=reason):
        parse_expression(text)


def test_operator_subset_and_division_by_zero():
    with pytest.raises(ExpressionError, match="operator / is not allowed"):
        parse_expression("4/2", operators="+-*")
    with pytest.raises(ExpressionError, match="division by zero"):
        evaluate(parse_expression("5/(3-3)"))


def test_literals_in_source_order_and_fraction_format():
    assert literals(parse_expression("25-(7*3)+1")) == [25, 7, 3, 1]
    assert format_fraction(Fraction(7, 2)) == "7/2" and format_fraction(Fraction(-4)) == "-4"
