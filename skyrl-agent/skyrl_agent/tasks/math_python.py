"""`math_python`: computation-heavy math questions with a sandboxed `python` tool (skyrl-gym's `PythonToolGroup`).

The questions (sums of powers, primes below n, modular powers, digit sums of factorials) are easy to program and
hard to do in one's head; the agent runs code, reads what it printed, and answers `<answer>N</answer>`. Reward 1.0
for the exact integer.
"""

from __future__ import annotations

import math
import random
from typing import Any

from skyrl_agent.registry import register_task
from skyrl_agent.tasks.base import Task
from skyrl_agent.trajectory import AgentTrajectory
from skyrl_gym.sandbox import SandboxLimits
from skyrl_gym.tools import ToolGroup
from skyrl_gym.tools.python import PythonToolGroup


def _primes_below(n: int) -> int:
    sieve = bytearray([1]) * n
    sieve[:2] = b"\x00\x00"[: min(2, n)]
    for p in range(2, int(n**0.5) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytearray(len(sieve[p * p :: p]))
    return sum(sieve)


def make_question(rng: random.Random) -> tuple[str, int]:
    """One (question, answer) pair."""
    kind = rng.randrange(4)
    if kind == 0:
        n, k = rng.randint(20, 200), rng.randint(2, 4)
        return f"What is the sum of i**{k} for i from 1 to {n}?", sum(i**k for i in range(1, n + 1))
    if kind == 1:
        n = rng.randint(100, 5000)
        return f"How many primes are there below {n}?", _primes_below(n)
    if kind == 2:
        a, b, m = rng.randint(2, 99), rng.randint(50, 500), rng.randint(7, 997)
        return f"What is {a}**{b} mod {m}?", pow(a, b, m)
    n = rng.randint(20, 80)
    return f"What is the sum of the digits of {n}!?", sum(int(d) for d in str(math.factorial(n)))


@register_task("math_python", builtin=True)
class MathPythonTask(Task):
    """Integer questions answered with the help of a sandboxed Python tool."""

    system_prompt = "Use the python tool to compute, then answer as <answer>N</answer>."

    def __init__(self, timeout_s: float = 10.0) -> None:
        self.limits = SandboxLimits(timeout_s=timeout_s)

    def build_dataset(self, size: int, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
        """`size` questions."""
        rng = random.Random(f"math_python/{split}/{seed}")
        rows = []
        for index in range(size):
            question, answer = make_question(rng)
            rows.append({"id": f"{split}-{seed}-{index}", "prompt": question, "answer": answer})
        return rows

    def tool_groups(self, instance: dict[str, Any]) -> list[ToolGroup]:
        """The sandboxed `python` tool."""
        return [PythonToolGroup(limits=self.limits)]

    def evaluate(self, instance: dict[str, Any], trajectory: AgentTrajectory) -> float:
        """1.0 for the exact integer."""
        answer = self.parse_number(trajectory.final_answer)
        return 1.0 if answer is not None and answer == instance["answer"] else 0.0
