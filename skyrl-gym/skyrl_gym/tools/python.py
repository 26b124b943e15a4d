"""Python tool group: runs model-written programs in the sandbox (`skyrl_gym.sandbox`) and returns what they printed.

Every call is a fresh sandboxed process (no state carries over between calls). What the model reads:
- the program finished with exit code 0: its stdout (trailing whitespace removed), then `[stderr]` and the stderr
  text if it wrote any, or `(the program printed nothing)`;
- the program failed (an exception, a time, memory or output limit, a signal): `Error: ...` naming the limit or
  the exit code with the last lines of the traceback, then `[stdout before the failure]` and that output if any.
A sandbox that cannot run the program at all is not the program's fault: that result has `service_error=True`.
"""

from __future__ import annotations

from typing import Optional

from skyrl_gym.sandbox import SandboxLimits, SandboxResult, run_python
from skyrl_gym.tools.core import ToolGroup, ToolResult, tool

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_OUTPUT_CHARS = 4000
TRACEBACK_LINES = 12
NO_OUTPUT = "(the program printed nothing)"


def clip_text(text: str, limit: int) -> str:
    """`text` cut to its first `limit` characters, saying how many were dropped."""
    return text if len(text) <= limit else f"{text[:limit]}\n... [{len(text) - limit} more characters]"


def _failure_reason(result: SandboxResult, limits: SandboxLimits) -> str:
    """Why the program did not finish normally, in words the model can act on."""
    if result.output_truncated:
        return f"the program's output exceeded {limits.max_output_bytes} bytes and it was stopped"
    if result.timed_out:
        return f"the program exceeded the time limit of {limits.timeout_s:g} s"
    head = "the program exceeded the memory limit" if result.memory_exceeded else f"the program {_ending(result)}"
    lines = [line for line in result.stderr.rstrip().splitlines() if line.strip()]
    tail = "\n".join(lines[-TRACEBACK_LINES:])
    return f"{head}:\n{tail}" if tail else head


def _ending(result: SandboxResult) -> str:
    if result.exit_code is None and result.signal is not None:
        return f"was killed by {result.signal_name}"
    return f"exited with code {result.exit_code}"


class PythonToolGroup(ToolGroup):
    """The `python` tool: run a Python program in a fresh sandbox and return its output (see the module docstring).

    `limits` are the sandbox limits of each run (default: `SandboxLimits` with a 10 s wall-clock limit);
    `max_output_chars` caps the text returned to the model.
    """

    def __init__(
        self,
        limits: Optional[SandboxLimits] = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        name: str = "sandbox",
    ) -> None:
        if isinstance(max_output_chars, bool) or not isinstance(max_output_chars, int) or max_output_chars < 1:
            raise ValueError(f"PythonToolGroup: max_output_chars must be a positive integer, got {max_output_chars!r}")
        self.limits = limits if limits is not None else SandboxLimits(timeout_s=DEFAULT_TIMEOUT_S)
        self.max_output_chars = max_output_chars
        super().__init__(name)

    @tool
    def python(self, code: str) -> ToolResult:
        """Run a Python program in a sandbox and return what it printed. Use print() to see values.

        Args:
            code: The program's source code.
        """
        if not code.strip():
            return ToolResult("python", False, error="the program is empty")
        try:
            result = run_python(code, limits=self.limits)
        except Exception as exc:  # the sandbox could not start the program at all
            message = f"the sandbox could not run the program: {type(exc).__name__}: {exc}"
            return ToolResult("python", False, error=message, service_error=True)
        if result.error:
            return ToolResult("python", False, error=f"the sandbox failed: {result.error}", service_error=True)
        stdout = result.stdout.rstrip()
        if not result.ok:
            reason = _failure_reason(result, self.limits)
            text = f"{reason}\n[stdout before the failure]\n{stdout}" if stdout else reason
            return ToolResult("python", False, error=clip_text(text, self.max_output_chars), data=result)
        stderr = result.stderr.rstrip()
        text = "\n".join(part for part in (stdout, f"[stderr]\n{stderr}" if stderr else "") if part) or NO_OUTPUT
        return ToolResult("python", True, output=clip_text(text, self.max_output_chars), data=result)
