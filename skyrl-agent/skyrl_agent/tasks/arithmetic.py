"""`tool_arithmetic`: multi-step arithmetic the model should not do in its head, with a `calc` tool.

An instance asks for e.g. `(37*48)-19`; the agent calls `calc` (or several times, one operation at a time), reads
the result and answers `<answer>1757</answer>`. Reward 1.0 for the exact value, else 0.0. Small enough for the
project's embedded char-level model once it is warm-started on tool-call traces.
"""

from __future__ import annotations

import ast
import operator
import random
from typing import Any

from skyrl_agent.registry import register_task, register_tool_group
from skyrl_agent.tasks.base import Task
from skyrl_agent.trajectory import AgentTrajectory
from skyrl_gym.tools import ToolGroup, tool

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
MAX_EXPRESSION_CHARS = 64


def evaluate_expression(expression: str) -> int:
    """The value of an integer expression of +, -, * and parentheses; anything else is refused with the reason."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot read {expression!r}: use integers, + - * and parentheses") from None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError(f"{ast.unparse(node)!r} is not allowed: use integers, + - * and parentheses")

    return value(tree)


class CalculatorTools(ToolGroup):
    """The `calc` tool."""

    def __init__(self) -> None:
        super().__init__("calculator")

    @tool
    def calc(self, expression: str) -> str:
        """Integer arithmetic: + - * ( ).

        Args:
            expression: e.g. 3*(4+5)
        """
        return str(evaluate_expression(expression))


@register_tool_group("calculator", builtin=True)
def calculator_tools() -> ToolGroup:
    """The calculator tool group (`tools: [calculator]`)."""
    return CalculatorTools()


@register_task("tool_arithmetic", builtin=True)
class ToolArithmeticTask(Task):
    """Two-operation integer arithmetic; `digits` sets the size of the first two operands."""

    system_prompt = "Use calc. Answer <answer>N</answer>."

    def __init__(self, digits: int = 2, operations: int = 2) -> None:
        if digits < 1 or operations not in (1, 2):
            raise ValueError(f"tool_arithmetic: digits must be >= 1 and operations 1 or 2, got {digits}, {operations}")
        self.digits, self.operations = digits, operations

    def build_dataset(self, size: int, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
        """`size` problems; train and test splits draw from different seeds."""
        rng = random.Random(f"tool_arithmetic/{split}/{seed}")
        low, high = 10 ** (self.digits - 1), 10**self.digits - 1
        rows = []
        for index in range(size):
            a, b = rng.randint(low, high), rng.randint(low, high)
            expression = f"{a}{rng.choice('+-*')}{b}"
            if self.operations == 2:
                expression = f"({expression}){rng.choice('+-')}{rng.randint(1, 99)}"
            rows.append(
                {"id": f"{split}-{seed}-{index}", "prompt": expression, "answer": evaluate_expression(expression)}
            )
        return rows

    def tool_groups(self, instance: dict[str, Any]) -> list[ToolGroup]:
        """One calculator."""
        return [CalculatorTools()]

    def evaluate(self, instance: dict[str, Any], trajectory: AgentTrajectory) -> float:
        """1.0 when the answer equals the expression's value."""
        answer = self.parse_number(trajectory.final_answer)
        return 1.0 if answer is not None and answer == instance["answer"] else 0.0
