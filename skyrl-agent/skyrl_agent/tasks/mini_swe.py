"""`mini_swe`: small generated Python repositories, each with one seeded bug and hidden tests that catch it.

An instance is a flat repository (a module of three functions, one of them wrong, and a README), an issue text the
agent reads, hidden tests it never sees, and the reference fix (one exact edit). The agent works through the
`repo` tools: list, view and edit files, run Python against the current files in skyrl-gym's sandbox (a fresh
process on a private copy: the program cannot change the repository, read the hidden tests or write outside its
folder), and `finish`. The reward is 1.0 when the hidden tests pass on the repository as the agent left it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from skyrl_agent.registry import register_task
from skyrl_agent.tasks.base import Task
from skyrl_agent.trajectory import AgentTrajectory
from skyrl_gym.sandbox import SandboxLimits, run_python
from skyrl_gym.tools import ToolGroup, ToolResult, tool

MODULE = "utils.py"
HIDDEN_TESTS = "test_hidden.py"
SANDBOX = SandboxLimits(timeout_s=5.0)
IMPORTABLE = "import os as _os, sys as _sys; _sys.path.insert(0, _os.getcwd())\n"
"""Put before every program: the sandbox runs Python isolated (no script folder on sys.path), and programs here
import the repository's modules. Tracebacks' line numbers are one higher than the agent's code."""


@dataclass(frozen=True)
class Family:
    """One function: its correct source, a one-line bug (`wrong` replaces `right`), the issue, hidden checks."""

    name: str
    source: str
    right: str
    wrong: str
    issue: str
    checks: tuple[str, ...]


def _families(rng: random.Random) -> list[Family]:
    lo, hi = rng.randint(-5, 0), rng.randint(5, 12)
    k = rng.randint(2, 4)
    return [
        Family(
            "clamp",
            "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
            "max(lo, min(x, hi))",
            "max(lo, min(x, lo))",
            f"clamp({hi + 3}, {lo}, {hi}) should be {hi}.",
            (
                f"clamp({hi + 3}, {lo}, {hi}) == {hi}",
                f"clamp({lo - 2}, {lo}, {hi}) == {lo}",
                f"clamp(3, {lo}, {hi}) == 3",
            ),
        ),
        Family(
            "mean",
            "def mean(xs):\n    return sum(xs) / len(xs)\n",
            "sum(xs) / len(xs)",
            "sum(xs) / (len(xs) - 1)",
            f"mean([{k}, {k}, {k}]) should be {float(k)}.",
            (f"mean([{k}, {k}, {k}]) == {float(k)}", "mean([1, 2, 3, 6]) == 3.0"),
        ),
        Family(
            "last_n",
            "def last_n(xs, n):\n    return xs[len(xs) - n:]\n",
            "xs[len(xs) - n:]",
            "xs[len(xs) - n - 1:]",
            f"last_n([1, 2, 3, 4, 5], {k}) should have {k} items.",
            (f"last_n([1, 2, 3, 4, 5], {k}) == {list(range(6 - k, 6))}", "last_n([7], 1) == [7]"),
        ),
        Family(
            "count_vowels",
            "def count_vowels(text):\n    return sum(ch in 'aeiou' for ch in text.lower())\n",
            "ch in 'aeiou'",
            "ch in 'aeio'",
            "count_vowels('umbrella') should be 3.",
            ("count_vowels('umbrella') == 3", "count_vowels('AEIOU') == 5", "count_vowels('xyz') == 0"),
        ),
        Family(
            "is_leap",
            "def is_leap(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n",
            "(year % 100 != 0 or year % 400 == 0)",
            "year % 100 != 0",
            "is_leap(2000) should be True.",
            ("is_leap(2000) is True", "is_leap(1900) is False", "is_leap(2024) is True", "is_leap(2023) is False"),
        ),
        Family(
            "scale",
            f"def scale(xs, factor={k}):\n    return [x * factor for x in xs]\n",
            "x * factor",
            "x + factor",
            f"scale([1, 2]) should be [{k}, {2 * k}].",
            (f"scale([1, 2]) == [{k}, {2 * k}]", "scale([3], 10) == [30]", "scale([]) == []"),
        ),
    ]


def build_repo(rng: random.Random, index: int) -> dict[str, Any]:
    """One instance: three functions (the first buggy), README, hidden tests, the reference fix."""
    families = rng.sample(_families(rng), 3)
    buggy = families[0]
    order = families[:]
    rng.shuffle(order)
    module = "\n\n".join(f.source.replace(f.right, f.wrong) if f is buggy else f.source for f in order)
    names = ", ".join(f.name for f in order)
    checks = [check for f in families for check in f.checks]
    tests = f"from utils import {names}\n\n" + "".join(f"assert {c}, {c!r}\n" for c in checks) + "print('PASSED')\n"
    old_line = next(line for line in module.splitlines() if buggy.wrong in line)
    return {
        "id": f"mini-swe-{index}",
        "prompt": f"Bug in {MODULE}: {buggy.issue} Fix it.",
        "files": {MODULE: module, "README.md": f"# utils\n\nHelpers: {names}.\n"},
        "hidden_tests": tests,
        "reference_fix": {"path": MODULE, "old": old_line, "new": old_line.replace(buggy.wrong, buggy.right)},
    }


def run_hidden_tests(files: dict[str, str], tests: str) -> tuple[bool, str]:
    """(passed, output) of the hidden tests on `files`, in the sandbox."""
    result = run_python(IMPORTABLE + tests, limits=SANDBOX, files=files)
    return result.ok and "PASSED" in result.stdout, (result.stdout + result.stderr)[-2000:]


class RepoTools(ToolGroup):
    """The `repo` tools over one trajectory's copy of the repository (kept in memory; every program runs on a
    fresh sandboxed copy of it)."""

    def __init__(self, files: dict[str, str]) -> None:
        super().__init__("repo")
        self.files = dict(files)

    @tool
    def list_files(self) -> str:
        """List the repository's files."""
        return "\n".join(sorted(self.files))

    @tool
    def view_file(self, path: str) -> ToolResult:
        """Show a file with line numbers.

        Args:
            path: the file name.
        """
        if path not in self.files:
            return ToolResult("view_file", False, error=f"no file {path!r}; files: {sorted(self.files)}")
        lines = self.files[path].splitlines()
        return ToolResult("view_file", True, output="\n".join(f"{i + 1}: {line}" for i, line in enumerate(lines)))

    @tool
    def edit_file(self, path: str, old: str, new: str) -> ToolResult:
        """Replace the exact text `old` (it must occur once) with `new` in a file.

        Args:
            path: the file name.
            old: the exact text to replace.
            new: the replacement.
        """
        text = self.files.get(path)
        if text is None:
            return ToolResult("edit_file", False, error=f"no file {path!r}; files: {sorted(self.files)}")
        count = text.count(old) if old else 0
        if count != 1:
            return ToolResult("edit_file", False, error=f"`old` occurs {count} times in {path}; it must occur once")
        self.files[path] = text.replace(old, new)
        return ToolResult("edit_file", True, output=f"edited {path}")

    @tool
    def run_python(self, code: str) -> ToolResult:
        """Run a Python program next to the repository's files (a sandboxed copy) and return its output.

        Args:
            code: the program.
        """
        result = run_python(IMPORTABLE + code, limits=SANDBOX, files=self.files)
        output = (result.stdout + (f"\n[stderr]\n{result.stderr}" if result.stderr else "")).strip()[-2000:]
        if result.error:
            return ToolResult("run_python", False, error=f"the sandbox failed: {result.error}", service_error=True)
        if not result.ok:
            reason = "timed out" if result.timed_out else f"exit code {result.exit_code}"
            return ToolResult("run_python", False, error=f"the program failed ({reason}):\n{output}")
        return ToolResult("run_python", True, output=output or "(no output)")

    @tool
    def finish(self, summary: str = "") -> str:
        """Say the work is done.

        Args:
            summary: what was changed.
        """
        return "finished"


@register_task("mini_swe", builtin=True)
class MiniSWETask(Task):
    """Fix the seeded bug so the hidden tests pass (see the module docstring)."""

    system_prompt = "Fix the bug with the repo tools, then call finish."

    def build_dataset(self, size: int, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
        """`size` repositories."""
        rng = random.Random(f"mini_swe/{split}/{seed}")
        return [build_repo(rng, index) for index in range(size)]

    def tool_groups(self, instance: dict[str, Any]) -> list[ToolGroup]:
        """The repo tools over a fresh copy of the instance's files."""
        return [RepoTools(instance["files"])]

    def workspace(self, groups: list[ToolGroup]) -> dict[str, Any]:
        """The repository's files as the agent left them."""
        repo = next(group for group in groups if isinstance(group, RepoTools))
        return {"files": dict(repo.files)}

    def check_instance(self, instance: Any, where: str) -> None:
        """An instance also needs its files and hidden tests."""
        super().check_instance(instance, where)
        for key in ("files", "hidden_tests"):
            if key not in instance:
                raise ValueError(f"{where}: the mini_swe instance has no {key!r} field")

    def evaluate(self, instance: dict[str, Any], trajectory: AgentTrajectory) -> float:
        """1.0 when the hidden tests pass on the files as the agent left them."""
        files = trajectory.workspace["files"]
        passed, _ = run_hidden_tests(files, instance["hidden_tests"])
        return 1.0 if passed else 0.0
