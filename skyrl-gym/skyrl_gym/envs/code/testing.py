"""Run a candidate program against code tests in the sandbox and judge each test (stdin and functional)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from skyrl_gym.envs.code.ground_truth import CodeTest
from skyrl_gym.sandbox import SandboxLimits, SandboxResult, run_python

WRONG_ANSWER = "wrong_answer"
RUNTIME_ERROR = "runtime_error"
TIMEOUT = "timeout"
MEMORY = "memory"
OUTPUT_LIMIT = "output_limit"
SANDBOX_ERROR = "sandbox_error"
NO_CODE_BLOCK = "no_code_block"

DETAIL_CHARS = 1000
SNIPPET_CHARS = 200
TRACEBACK_LINES = 8
RESULT_MARKER = "\x00SKYRL_RESULT\x00"

# The functional-test driver (main.py). It runs solution.py in a namespace that already has the typing names and a few
# stdlib modules (LeetCode-style solutions assume `List` etc.), calls the function, and prints the JSON result after
# a marker; the solution's own prints go to stderr so they cannot be confused with the result.
_FUNCTIONAL_DRIVER = """\
import json, sys
with open("call.json", encoding="utf-8") as _f:
    _call = json.load(_f)
_real_stdout, sys.stdout = sys.stdout, sys.stderr
_ns = {"__name__": "solution", "__builtins__": __builtins__}
exec("from typing import *\\nimport bisect, collections, functools, heapq, itertools, math, re, string", _ns)
with open("solution.py", encoding="utf-8") as _f:
    exec(compile(_f.read(), "solution.py", "exec"), _ns)
_name, _cls = _call["fn_name"], _ns.get("Solution")
if isinstance(_cls, type) and hasattr(_cls, _name):
    _target = getattr(_cls(), _name)
elif callable(_ns.get(_name)):
    _target = _ns[_name]
else:
    raise NameError(f"the program defines neither Solution.{_name} nor a function {_name}")
_value = _target(*_call["args"])
try:
    _payload = {"json": json.dumps(_value)}
except (TypeError, ValueError):
    _payload = {"unserializable": repr(_value)[:300]}
sys.stdout = _real_stdout
sys.stdout.write(__MARKER__ + json.dumps(_payload) + "\\n")
""".replace("__MARKER__", repr(RESULT_MARKER))


@dataclass(frozen=True)
class TestOutcome:
    """The verdict on one test: `kind` is None when it passed, else one of the failure kinds above."""

    index: int
    passed: bool
    kind: Optional[str] = None
    detail: str = ""
    wall_time_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view for metadata."""
        return {"test_index": self.index, "kind": self.kind, "detail": self.detail}


@dataclass
class TestReport:
    """All verdicts of one evaluation; tests never run (after a stop) count as failed."""

    total: int
    outcomes: list[TestOutcome] = field(default_factory=list)
    sandbox_layers: list[str] = field(default_factory=list)

    @property
    def passed(self) -> int:
        """How many tests passed."""
        return sum(outcome.passed for outcome in self.outcomes)

    @property
    def first_failure(self) -> Optional[TestOutcome]:
        """The first failed test's verdict, if any."""
        return next((outcome for outcome in self.outcomes if not outcome.passed), None)

    def reward(self, partial_credit: bool) -> float:
        """1.0 iff every test passed; with partial credit, the fraction passed."""
        if partial_credit:
            return self.passed / self.total if self.total else 0.0
        return 1.0 if self.total and self.passed == self.total else 0.0

    def to_metadata(self) -> dict[str, Any]:
        """Step metadata: counts, the first failure (kind and truncated detail) and the sandbox layers used."""
        failure = self.first_failure
        return {
            "tests_passed": self.passed,
            "tests_total": self.total,
            "tests_run": len(self.outcomes),
            "first_failure": failure.to_dict() if failure else None,
            "sandbox_layers": self.sandbox_layers,
        }


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how much was dropped."""
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more chars]"


def clip_tail(text: str, limit: int) -> str:
    """The last `limit` characters of `text`, saying how much was dropped before them."""
    return text if len(text) <= limit else f"[{len(text) - limit} chars before] ...{text[-limit:]}"


def normalize_output(text: str) -> str:
    """Per-line whitespace normalisation for stdout comparison: unify newlines, strip trailing spaces on each line
    and trailing blank lines."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


OutputMatcher = Callable[[str, str], bool]
"""Judges a stdin test: `(expected, got) -> passed`, with the test's expected output and the program's stdout."""


def outputs_match(expected: str, got: str) -> bool:
    """The `code` env's stdout rule: equal after `normalize_output` (per-line trailing whitespace ignored)."""
    return normalize_output(got) == normalize_output(expected)


def _runtime_error_detail(result: SandboxResult) -> str:
    lines = [line for line in result.stderr.rstrip().splitlines() if line.strip()]
    tail = "\n".join(lines[-TRACEBACK_LINES:])
    prefix = "" if result.exit_code not in (None, 0) or result.signal is None else f"killed by {result.signal_name}\n"
    return clip_tail(prefix + (tail or result.describe_exit()), DETAIL_CHARS)


def _sandbox_failure(result: SandboxResult) -> Optional[tuple[str, str]]:
    """Classify a run that did not finish normally, or return None when it did."""
    if result.error:
        return SANDBOX_ERROR, clip(result.error, DETAIL_CHARS)
    if result.output_truncated:
        return OUTPUT_LIMIT, "the program's output exceeded the output limit and it was stopped"
    if result.timed_out:
        return TIMEOUT, f"the program exceeded the time limit (ran {result.wall_time_s:.2f} s wall clock)"
    if result.memory_exceeded:
        return MEMORY, clip_tail(
            "the program exceeded the memory limit\n" + _runtime_error_detail(result), DETAIL_CHARS
        )
    if result.exit_code != 0:
        return RUNTIME_ERROR, _runtime_error_detail(result)
    return None


def _wrong_answer(test: CodeTest, expected: str, got: str) -> str:
    return clip(
        f"input: {clip(test.input, SNIPPET_CHARS)}\nexpected: {clip(expected, SNIPPET_CHARS)}\n"
        f"got: {clip(got, SNIPPET_CHARS)}",
        DETAIL_CHARS,
    )


def _limits_for(test: CodeTest, limits: SandboxLimits) -> SandboxLimits:
    needed = 2 * len(test.output.encode("utf-8")) + 65536  # never cut a correct answer short
    return limits if limits.max_output_bytes >= needed else limits.replace(max_output_bytes=needed)


def run_stdin_test(
    program: str, test: CodeTest, limits: SandboxLimits, match: OutputMatcher = outputs_match
) -> tuple[TestOutcome, SandboxResult]:
    """Run the program on the test's input and judge its stdout with `match` (default: `outputs_match`)."""
    result = run_python(program, stdin=test.input, limits=_limits_for(test, limits))
    failure = _sandbox_failure(result)
    if failure:
        return TestOutcome(test.index, False, *failure, wall_time_s=result.wall_time_s), result
    if match(test.output, result.stdout):
        return TestOutcome(test.index, True, wall_time_s=result.wall_time_s), result
    detail = _wrong_answer(test, test.output, result.stdout)
    return TestOutcome(test.index, False, WRONG_ANSWER, detail, result.wall_time_s), result


def run_functional_test(program: str, test: CodeTest, limits: SandboxLimits) -> tuple[TestOutcome, SandboxResult]:
    """Call the test's function with its JSON arguments and compare the JSON-normalised return value."""
    call = json.dumps({"fn_name": test.fn_name, "args": list(test.args or ())})
    result = run_python(
        _FUNCTIONAL_DRIVER, limits=_limits_for(test, limits), files={"solution.py": program, "call.json": call}
    )
    failure = _sandbox_failure(result)
    if failure:
        return TestOutcome(test.index, False, *failure, wall_time_s=result.wall_time_s), result
    _, marker, tail = result.stdout.rpartition(RESULT_MARKER)
    try:
        payload = json.loads(tail.splitlines()[0]) if marker and tail else None
    except (json.JSONDecodeError, IndexError):
        payload = None
    if not isinstance(payload, dict):
        detail = "the program finished without returning a result"
        return TestOutcome(test.index, False, RUNTIME_ERROR, detail, result.wall_time_s), result
    if "json" not in payload:
        got = f"a value that is not JSON-serializable: {payload.get('unserializable', '?')}"
        detail = _wrong_answer(test, test.output, got)
        return TestOutcome(test.index, False, WRONG_ANSWER, detail, result.wall_time_s), result
    value = json.loads(payload["json"])  # tuples became lists, exactly as in the expected JSON
    if value == test.expected:
        return TestOutcome(test.index, True, wall_time_s=result.wall_time_s), result
    detail = _wrong_answer(test, test.output, payload["json"])
    return TestOutcome(test.index, False, WRONG_ANSWER, detail, result.wall_time_s), result


def run_tests(
    program: str,
    tests: list[CodeTest],
    limits: SandboxLimits,
    stop_at_first_failure: bool = True,
    total_timeout_s: Optional[float] = None,
    match: OutputMatcher = outputs_match,
) -> TestReport:
    """Run the tests in order, each in a fresh sandbox; stop at the first failure unless told otherwise.

    With `total_timeout_s`, tests not started before the budget ran out count as failed (kind `timeout`). `match`
    judges the stdout of stdin tests.
    """
    report = TestReport(total=len(tests))
    started = time.monotonic()
    for test in tests:
        if total_timeout_s is not None and time.monotonic() - started > total_timeout_s:
            detail = f"not run: the total time budget of {total_timeout_s} s was used up"
            report.outcomes.append(TestOutcome(test.index, False, TIMEOUT, detail))
            if stop_at_first_failure:
                break
            continue
        if test.testtype == "functional":
            outcome, result = run_functional_test(program, test, limits)
        else:
            outcome, result = run_stdin_test(program, test, limits, match)
        if not report.sandbox_layers:
            report.sandbox_layers = result.active_layers
        report.outcomes.append(outcome)
        if stop_at_first_failure and not outcome.passed:
            break
    return report
