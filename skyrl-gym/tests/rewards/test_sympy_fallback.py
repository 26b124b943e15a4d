"""Tests for the sympy size screen and the restricted sympy fallback comparison."""

import sympy

from skyrl_gym.rewards.sympy_fallback import (
    MAX_EVALUATED_BITS,
    is_too_large,
    latex_to_plain,
    parse_plain_math,
    sympy_equivalent,
)


def test_size_screen():
    two, ten, x = sympy.Integer(2), sympy.Integer(10), sympy.Symbol("x")
    assert not is_too_large(sympy.Pow(two, 100, evaluate=False))
    assert not is_too_large(sympy.factorial(sympy.Integer(100), evaluate=False))
    assert is_too_large(sympy.Pow(two, sympy.Pow(ten, 10, evaluate=False), evaluate=False))
    assert is_too_large(sympy.factorial(sympy.Pow(ten, 8, evaluate=False), evaluate=False))
    assert is_too_large(sympy.Pow(x + 1, sympy.Integer(10) ** 30, evaluate=False))
    assert is_too_large(sympy.Integer(2) ** (MAX_EVALUATED_BITS + 1))
    assert not is_too_large(sympy.FiniteSet(1, 2, x))


def test_latex_to_plain():
    assert latex_to_plain("\\frac{\\sqrt{2}}{2}") == "((sqrt(2))/(2))"
    assert latex_to_plain("\\sqrt[3]{8}") == "((8)**(1/(3)))"
    assert latex_to_plain("2\\cdot x^{2}").replace(" ", "") == "2*x**(2)"
    assert latex_to_plain("\\alpha + 1") is None


def test_parser_admits_only_arithmetic():
    assert sympy.simplify(parse_plain_math("2xy+1") - (2 * sympy.Symbol("x") * sympy.Symbol("y") + 1)) == 0
    assert parse_plain_math("__import__('os').system('true')") is None
    assert parse_plain_math("x.n") is None
    assert parse_plain_math("lambda: 1") is None
    assert parse_plain_math("E") == sympy.Symbol("E")  # a letter is a variable, never sympy's constant
    assert parse_plain_math("I") == sympy.Symbol("I")
    assert parse_plain_math("(" * 300 + "1" + ")" * 300) is None


def test_fallback_equivalence():
    assert sympy_equivalent("2x+2", "2(x+1)") is True
    assert sympy_equivalent("\\frac{1}{2}", "0.5") is True
    assert sympy_equivalent("(1, 2)", "(1,2)") is True
    assert sympy_equivalent("(2, 1)", "(1,2)") is False
    assert sympy_equivalent("(1, 2)", "3") is False
    assert sympy_equivalent("x^2", "x^3") is False
    assert sympy_equivalent("2^{10^{10}}", "1") is None
    assert sympy_equivalent("\\alpha", "1") is None
