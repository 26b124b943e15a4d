"""Running one trajectory's tool calls: schemas under short names, schema-checked calls with a time limit each."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Optional

from skyrl_gym.tools import ParsedToolCall, Toolbox, ToolGroup


@dataclass
class ToolCallRecord:
    """One tool call as the trajectory records it."""

    name: str
    arguments: dict[str, Any]
    ok: bool
    output: str
    seconds: float
    error: Optional[str] = None


class ToolRunner:
    """The tool groups of one trajectory. Tools are shown under their bare names when no two groups share one
    (`group__tool` otherwise); a call runs in a thread of `executor` (asyncio's default one when None) and is
    abandoned with an error observation after `timeout_s` (Python cannot stop a thread: a tool that may hang should
    bound itself, as the sandboxed `python` tool does)."""

    def __init__(self, groups: list[ToolGroup], timeout_s: float, executor: Optional[Executor] = None) -> None:
        self.toolbox = Toolbox()
        for group in groups:
            self.toolbox.add_group(group)
        self.timeout_s = timeout_s
        self.executor = executor

    def schemas(self) -> list[dict[str, Any]]:
        """Every tool in the chat-template format."""
        names = [t for g in self.toolbox.groups for t in g.get_tool_names()]
        schemas = []
        for group in self.toolbox.groups:
            for tool_name in group.get_tool_names():
                shown = tool_name if names.count(tool_name) == 1 else f"{group.name}__{tool_name}"
                schemas.append(group.get_tool(tool_name).openai_schema(shown))
        return schemas

    async def call(self, parsed: ParsedToolCall) -> ToolCallRecord:
        """Run one parsed call; a malformed call, an unknown tool, bad arguments, an exception or a timeout each come
        back as a failed record whose `output` is the error text the model reads."""
        start = time.monotonic()
        if parsed.error:
            return ToolCallRecord(parsed.name, parsed.arguments, False, f"Error: {parsed.error}", 0.0, parsed.error)
        try:
            running = asyncio.get_running_loop().run_in_executor(
                self.executor, self.toolbox.call, parsed.name, parsed.arguments
            )
            result = await asyncio.wait_for(running, timeout=self.timeout_s)
        except TimeoutError:
            error = f"tool {parsed.name!r} timed out after {self.timeout_s:g} s"
            return ToolCallRecord(
                parsed.name, parsed.arguments, False, f"Error: {error}", time.monotonic() - start, error
            )
        seconds = time.monotonic() - start
        return ToolCallRecord(parsed.name, parsed.arguments, result.ok, result.text, seconds, result.error)

    def close(self) -> None:
        """Close every group."""
        self.toolbox.close()
