"""Sympy pieces of the math checker: a size screen for parsed expressions and a safe fallback equivalence test.

`is_too_large` bounds the number of bits an expression would need once evaluated (`2^{10^{10}}`, `(10^9)!`), so no
comparison starts an uninterruptible multi-minute big-integer computation. `sympy_equivalent` is the fallback used
when math-verify cannot parse an answer: it turns a small LaTeX subset into plain arithmetic, admits only digits,
operators, single-letter variables and a few function names (so `parse_expr`'s `eval` never sees anything else),
and compares by `simplify(a - b) == 0`.
"""

from __future__ import annotations

import math
import re
import string
from tokenize import TokenError
from typing import Any, Optional

import sympy
from sympy.matrices import MatrixBase
from sympy.parsing.sympy_parser import implicit_multiplication, parse_expr, standard_transformations

MAX_EVALUATED_BITS = 1 << 14  # about 4,900 decimal digits: anything bigger is not a plausible final answer
_MAX_DEPTH = 200
_FUNCTIONS = {"sqrt": sympy.sqrt, "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "log": sympy.log}
_FUNCTIONS.update({"ln": sympy.log, "exp": sympy.exp, "pi": sympy.pi})
_LOCALS: dict[str, Any] = {letter: sympy.Symbol(letter) for letter in string.ascii_letters}
_LOCALS.update(_FUNCTIONS)
_ALLOWED_TEXT = re.compile(r"^[0-9A-Za-z+\-*/().,\s]*$")
_LATEX_WORDS = {"\\cdot": "*", "\\times": "*", "\\div": "/", "\\pi": " pi ", "\\ln": " ln ", "\\log": " log "}
_LATEX_WORDS.update({"\\sin": " sin ", "\\cos": " cos ", "\\tan": " tan ", "\\exp": " exp "})


def _log2_bound(node: Any, depth: int = 0) -> float:
    """An upper bound on log2 of the largest number evaluating `node` can produce (inf when unbounded)."""
    if depth > _MAX_DEPTH:
        return math.inf
    if isinstance(node, (list, tuple, MatrixBase)):
        items = list(node)
        return max((_log2_bound(item, depth + 1) for item in items), default=0.0)
    if not isinstance(node, sympy.Basic):
        return 0.0
    if node.is_Integer:
        return float(max(1, abs(int(node)).bit_length()))
    if node.is_Rational:
        return float(max(abs(node.p).bit_length(), node.q.bit_length()))
    if node.is_Float:
        _, mantissa, exponent, bit_count = node._mpf_
        return float(abs(exponent + bit_count) + bit_count) if mantissa else 1.0
    if node.is_Atom:
        return 2.0
    bounds = [_log2_bound(arg, depth + 1) for arg in node.args]
    if isinstance(node, sympy.Pow):
        base_bits, exponent_bits = bounds
        if exponent_bits > 62:
            return math.inf
        return max(base_bits, 1.0) * 2.0**exponent_bits
    if isinstance(node, sympy.Add):
        return max(bounds, default=0.0) + len(bounds).bit_length()
    if isinstance(node, sympy.Mul):
        return sum(bounds)
    if isinstance(node, sympy.Function):  # factorial, binomial, gamma, ...: assume factorial-like growth
        argument_bits = max(bounds, default=1.0)
        if argument_bits > 62:
            return math.inf
        return 2.0**argument_bits * max(argument_bits, 1.0)
    return max(bounds, default=0.0)  # containers: sets, tuples, intervals, relations


def is_too_large(expression: Any) -> bool:
    """True when evaluating `expression` could need more than `MAX_EVALUATED_BITS` bits (e.g. `2^{10^{10}}`)."""
    try:
        return _log2_bound(expression) > MAX_EVALUATED_BITS
    except RecursionError:
        return True


_FRACTION = re.compile(r"\\frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_NTH_ROOT = re.compile(r"\\sqrt\s*\[([^\[\]{}]*)\]\s*\{([^{}]*)\}")
_SQUARE_ROOT = re.compile(r"\\sqrt\s*\{([^{}]*)\}")


def latex_to_plain(answer: str) -> Optional[str]:
    """Rewrite a LaTeX subset (\\frac, \\sqrt, \\cdot, \\pi, ^, braces) as plain arithmetic; None if unsupported."""
    text = answer
    for _ in range(64):  # innermost groups first, a bounded number of rewrites
        if match := _FRACTION.search(text):
            replacement = f"(({match.group(1)})/({match.group(2)}))"
        elif match := _NTH_ROOT.search(text):
            replacement = f"(({match.group(2)})**(1/({match.group(1)})))"
        elif match := _SQUARE_ROOT.search(text):
            replacement = f"sqrt({match.group(1)})"
        else:
            break
        text = text[: match.start()] + replacement + text[match.end() :]
    for word, replacement in _LATEX_WORDS.items():
        text = text.replace(word, replacement)
    text = text.replace("{", "(").replace("}", ")").replace("^", "**")
    return None if "\\" in text else text


def parse_plain_math(text: str) -> Optional[Any]:
    """Parse plain arithmetic ("2x+1", "(1, 2)", "sqrt(2)/2") to sympy without evaluating it; None if not allowed.

    Only digits, `+-*/().,`, whitespace, single-letter variables and sqrt/sin/cos/tan/log/ln/exp/pi pass, and a
    dot must sit between digits, so nothing but arithmetic reaches `parse_expr`.
    """
    if len(text) > 500 or not _ALLOWED_TEXT.match(text) or re.search(r"(?<!\d)\.|\.(?!\d)", text):
        return None
    words = []
    for token in re.split(r"([A-Za-z]+)", text):
        if token.isalpha() and token not in _FUNCTIONS:
            token = "*".join(token)  # "xy" is x times y
        words.append(token)
    plain = "".join(words)
    transformations = standard_transformations + (implicit_multiplication,)
    try:
        return parse_expr(plain, local_dict=dict(_LOCALS), transformations=transformations, evaluate=False)
    except (SyntaxError, TypeError, ValueError, AttributeError, RecursionError, sympy.SympifyError, TokenError):
        return None


def _scalars_equal(left: Any, right: Any) -> bool:
    """Symbolic equality of two scalar sympy expressions (`simplify(left - right) == 0`)."""
    if not isinstance(left, sympy.Expr) or not isinstance(right, sympy.Expr):
        return False
    return sympy.simplify(left - right) == 0


def sympy_equivalent(prediction: str, ground_truth: str) -> Optional[bool]:
    """Compare two cleaned LaTeX answers with sympy; None when either cannot be parsed safely or is too large.

    Comma-separated answers are compared as ordered tuples, element by element.
    """
    parsed = []
    for answer in (prediction, ground_truth):
        plain = latex_to_plain(answer)
        expression = None if plain is None else parse_plain_math(plain)
        if expression is None or is_too_large(expression):
            return None
        parsed.append(expression)
    left, right = parsed
    if isinstance(left, tuple) or isinstance(right, tuple):
        if not (isinstance(left, tuple) and isinstance(right, tuple)) or len(left) != len(right):
            return False
        return all(_scalars_equal(a, b) for a, b in zip(left, right))
    return _scalars_equal(left, right)
