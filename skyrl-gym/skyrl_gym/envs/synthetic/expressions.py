"""Safe parsing and exact evaluation of small integer expressions (+ - * / and parentheses) with `ast`, never eval."""

from __future__ import annotations

import ast
import re
from fractions import Fraction

MAX_EXPRESSION_LENGTH = 200
"""Longer expression texts are rejected before parsing (keeps parsing and evaluation cheap)."""

_OPERATORS: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_OTHER_OPERATORS: dict[type, str] = {
    ast.Pow: "**",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.BitAnd: "&",
}
_DIGITS = re.compile(r"[0-9]+")


class ExpressionError(ValueError):
    """The text is not an allowed expression, or it has no value (division by zero)."""


def parse_expression(text: str, operators: str = "+-*/", max_length: int = MAX_EXPRESSION_LENGTH) -> ast.expr:
    """Parse `text` into an AST that holds only decimal integer literals, parentheses and the given binary operators.

    Raises ExpressionError with a readable reason for anything else (names, calls, `**`, unary signs, floats, ...).
    """
    text = text.strip()
    if not text:
        raise ExpressionError("the expression is empty")
    if len(text) > max_length:
        raise ExpressionError(f"the expression has {len(text)} characters; at most {max_length} are allowed")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not a valid expression: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ExpressionError(f"not a valid expression: {exc}") from None
    _check_nodes(tree.body, text, operators)
    return tree.body


def _check_nodes(root: ast.expr, text: str, operators: str) -> None:
    allowed = " ".join(operators)
    stack: list[ast.AST] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.BinOp):
            symbol = _OPERATORS.get(type(node.op))
            if symbol is None or symbol not in operators:
                name = symbol or _OTHER_OPERATORS.get(type(node.op), type(node.op).__name__)
                raise ExpressionError(f"operator {name} is not allowed; only {allowed} and parentheses")
            stack.extend((node.left, node.right))
        elif isinstance(node, ast.Constant):
            source = ast.get_source_segment(text, node) or ""
            if type(node.value) is not int or not _DIGITS.fullmatch(source):
                raise ExpressionError(f"{source or node.value!r} is not a plain decimal integer literal")
        elif isinstance(node, ast.UnaryOp):
            raise ExpressionError("unary signs are not allowed; only binary " + allowed)
        else:
            raise ExpressionError(
                f"{type(node).__name__} is not allowed; only integer literals, {allowed} and parentheses"
            )


def evaluate(node: ast.expr) -> Fraction:
    """Exact rational value of a checked expression AST; division by zero raises ExpressionError."""
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    if not isinstance(node, ast.BinOp):
        raise ExpressionError(f"cannot evaluate {type(node).__name__}")
    left, right = evaluate(node.left), evaluate(node.right)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    if isinstance(node.op, ast.Div):
        if right == 0:
            raise ExpressionError("division by zero")
        return left / right
    raise ExpressionError(f"cannot evaluate operator {type(node.op).__name__}")


def literals(node: ast.expr) -> list[int]:
    """The integer literals of an expression AST, left to right."""
    found = [
        (child.col_offset, child.lineno, child.value) for child in ast.walk(node) if isinstance(child, ast.Constant)
    ]
    return [value for _, _, value in sorted(found, key=lambda item: (item[1], item[0]))]


def format_fraction(value: Fraction) -> str:
    """`7` for integers, `7/2` otherwise."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
