"""`ReActAgent`: reason, call tools, read their results, repeat, answer with `<answer>...</answer>`."""

from __future__ import annotations

import time

from skyrl_agent.agents.base import BaseAgent
from skyrl_agent.registry import register_agent
from skyrl_agent.tool_calls import find_answer, find_tool_calls
from skyrl_gym.tools import ParsedToolCall


@register_agent("react", builtin=True)
class ReActAgent(BaseAgent):
    """Each turn the model either calls tools (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, several
    allowed) or answers. A turn with neither ends the trajectory with `no_action` (its text counts as the answer).
    Tool results come back as `tool` messages, errors included (a malformed call, an unknown tool, bad arguments, an
    exception, a timeout): the model reads them and carries on."""

    async def generate(self) -> None:
        """Sample a turn; queue its tool calls, or finish."""
        if self.trajectory.turns >= self.ctx.cfg.generator.max_iterations:
            self.finish("max_iterations")
            return
        generation = await self.sample_turn()
        if generation is None:
            return
        calls = self.find_actions(generation.text)
        if calls:
            self.pending_calls = calls
            return
        answer = find_answer(generation.text)
        self.trajectory.final_answer = answer if answer is not None else generation.text.strip()
        if generation.stop_reason == "length" and answer is None:
            self.finish("length")
        else:
            self.finish("answer" if answer is not None else "no_action")

    def find_actions(self, text: str) -> list[ParsedToolCall]:
        """The tool calls a turn makes (subclasses add other kinds of action)."""
        return find_tool_calls(text)

    async def execute_tools(self) -> None:
        """Run the queued calls (at most `agent.max_tool_calls_per_turn`) and add one tool message per call."""
        started = time.monotonic()
        limit = self.ctx.cfg.agent.max_tool_calls_per_turn
        calls, skipped = self.pending_calls[:limit], len(self.pending_calls) - limit
        self.pending_calls = []
        observations = []
        for parsed in calls:
            record = await self.tools.call(parsed)
            self.trajectory.tool_calls.append(record)
            if record.error:
                self.trajectory.errors.append(f"turn {self.trajectory.turns}: {record.error}")
            observations.append({"role": "tool", "content": record.output})
        if skipped > 0:
            note = f"Error: only {limit} tool calls run per turn; {skipped} more were not run"
            observations.append({"role": "tool", "content": note})
            self.trajectory.errors.append(f"turn {self.trajectory.turns}: {skipped} tool calls over the limit")
        self._add_time("tools_s", started)
        self.add_observation(observations)
