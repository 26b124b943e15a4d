"""`CodeActAgent`: actions are code. A fenced ```python block in a turn runs in skyrl-gym's sandbox (through the
task's `run_python` tool, next to the task's files); tool calls work as in ReAct (view and edit files, ...); the
`finish` tool ends the trajectory."""

from __future__ import annotations

import re

from skyrl_agent.agents.react import ReActAgent
from skyrl_agent.registry import register_agent
from skyrl_agent.tool_calls import find_tool_calls, strip_thinking
from skyrl_gym.tools import ParsedToolCall

_CODE = re.compile(r"```(?:python|py)\s*\n(.*?)```", re.DOTALL)
CODE_TOOL = "run_python"
FINISH_TOOL = "finish"


def find_actions(text: str) -> list[ParsedToolCall]:
    """Tool calls, then each fenced python block as a `run_python` call (thinking blocks ignored)."""
    visible = strip_thinking(text)
    calls = find_tool_calls(visible)
    calls += [ParsedToolCall(CODE_TOOL, {"code": block}) for block in _CODE.findall(visible)]
    return calls


@register_agent("codeact", builtin=True)
class CodeActAgent(ReActAgent):
    """ReAct whose turns may also be code (see the module docstring). The task must offer a `run_python` tool
    (mini_swe's `repo` tools do) for code actions; a turn with no action ends the trajectory as in ReAct (`answer`
    with an `<answer>`, else `no_action`), a `finish` call ends it with `finish` after the calls before it ran."""

    def find_actions(self, text: str) -> list[ParsedToolCall]:
        """Tool calls and fenced python blocks."""
        return find_actions(text)

    async def execute_tools(self) -> None:
        """Run the actions up to a `finish` call; `finish` ends the trajectory with its summary as the answer."""
        finishing = next((i for i, call in enumerate(self.pending_calls) if call.name == FINISH_TOOL), None)
        if finishing is None:
            await super().execute_tools()
            return
        summary = self.pending_calls[finishing].arguments.get("summary", "")
        self.pending_calls = self.pending_calls[:finishing]
        if self.pending_calls:
            await super().execute_tools()
            if self.done:  # the observation overflowed the context
                return
        self.trajectory.final_answer = str(summary)
        self.finish("finish")
