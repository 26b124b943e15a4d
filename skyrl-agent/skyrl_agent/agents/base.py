"""`BaseAgent`: one trajectory of one instance, in stages a dispatcher can schedule apart:
`initialize()`, then `generate()` (one model turn) and `execute_tools()` while not `done`, then `evaluate()`.

Subclass it (and register it with `@register_agent("name")`) to write an agent: `initialize` sets the first messages,
`generate` samples a turn and decides what happens next (`pending_calls`, `finish(...)`), `execute_tools` runs the
pending calls and adds their observation, `evaluate` scores the trajectory. The token bookkeeping
(`sample_turn`, `add_observation`) keeps the trajectory token-in/token-out.
"""

from __future__ import annotations

import time
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any, Optional

from skyrl_agent.backends.base import AgentBackend, Generation, TurnRequest
from skyrl_agent.config import AgentRunConfig
from skyrl_agent.tasks.base import Task
from skyrl_agent.tool_calls import strip_thinking
from skyrl_agent.tool_runner import ToolRunner
from skyrl_agent.trajectory import AgentTrajectory, TurnSample
from skyrl_gym.tools import ParsedToolCall
from skyrl_train.generators.chat import ObservationRenderer, prompt_token_ids
from skyrl_train.inference.types import SamplingParams


@dataclass
class AgentContext:
    """What every agent of a run shares: config, task, backend, tokenizer, the observation renderer, the turn
    sampling params, and the threads tool calls run in (None: asyncio's default executor)."""

    cfg: AgentRunConfig
    task: Task
    backend: AgentBackend
    tokenizer: Any
    renderer: ObservationRenderer
    params: SamplingParams
    extra_tool_groups: list[Any]
    tool_executor: Optional[Executor] = None


class BaseAgent:
    """One trajectory (see the module docstring)."""

    def __init__(self, ctx: AgentContext, instance: dict[str, Any], index: int, seed: Optional[int] = None) -> None:
        self.ctx, self.instance, self.index, self.seed = ctx, instance, index, seed
        self.tools = ToolRunner(
            ctx.task.tool_groups(instance) + [factory() for factory in ctx.extra_tool_groups],
            ctx.cfg.agent.tool_timeout_s,
            ctx.tool_executor,
        )
        self.messages: list[dict[str, Any]] = []
        self.trajectory = AgentTrajectory(str(instance["id"]), index, prompt_ids=[])
        self.pending_calls: list[ParsedToolCall] = []
        self.done = False
        self._started = time.monotonic()

    # ---- stages ---------------------------------------------------------------------------------------------------
    async def initialize(self) -> None:
        """The first messages (system prompt, user message) and the prompt's token ids."""
        system = self.ctx.task.system_prompt
        self.messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": self.ctx.task.user_message(self.instance)}
        ]
        self.trajectory.prompt_ids = self.render(self.messages)

    async def generate(self) -> None:
        """One model turn; sets `pending_calls` or finishes."""
        raise NotImplementedError

    async def execute_tools(self) -> None:
        """Run `pending_calls` and add their observation."""
        raise NotImplementedError

    async def evaluate(self) -> float:
        """Score the trajectory with the task's evaluator (after collecting what its tools left behind)."""
        self.trajectory.workspace = self.ctx.task.workspace(self.tools.toolbox.groups)
        self.trajectory.reward = float(self.ctx.task.evaluate(self.instance, self.trajectory))
        return self.trajectory.reward

    def close(self) -> None:
        """Release the trajectory's tools; record the wall time and the messages."""
        self.trajectory.timing["wall_s"] = time.monotonic() - self._started
        self.trajectory.messages = list(self.messages)
        self.tools.close()

    # ---- token bookkeeping ----------------------------------------------------------------------------------------
    def render(self, messages: list[dict[str, Any]]) -> list[int]:
        """Messages (and the tools) through the chat template, generation prompt on."""
        return prompt_token_ids(self.ctx.tokenizer, messages, tools=self.tools.schemas() or None)

    def finish(self, stop_reason: str, error: Optional[str] = None) -> None:
        """End the trajectory with `stop_reason` (and an error to record)."""
        self.done, self.pending_calls = True, []
        self.trajectory.stop_reason = stop_reason
        if error:
            self.trajectory.errors.append(error)

    def context_ids(self) -> list[int]:
        """The next turn's context: prompt and response so far (`thinking=keep`), or the history re-rendered
        without thinking blocks (`thinking=strip`)."""
        if self.ctx.cfg.agent.thinking == "keep":
            return self.trajectory.prompt_ids + self.trajectory.response_ids
        history = [
            {**m, "content": strip_thinking(m["content"])} if m["role"] == "assistant" else m for m in self.messages
        ]
        return self.render(history)

    async def sample_turn(self) -> Optional[Generation]:
        """Sample the next model turn and record its tokens; None (trajectory finished) when the context is full."""
        context = self.context_ids()
        room = self.ctx.cfg.generator.max_prompt_length - len(context)
        if room <= 0:
            self.finish(
                "context_overflow", f"the context reached {len(context)} tokens before turn {self.trajectory.turns + 1}"
            )
            return None
        params = replace(self.ctx.params, max_tokens=min(self.ctx.params.max_tokens, room))
        seed = None if self.seed is None else self.seed + self.trajectory.turns
        started = time.monotonic()
        generation = await self.ctx.backend.generate(
            TurnRequest(context, list(self.messages), self.tools.schemas(), params, seed)
        )
        self._add_time("generate_s", started)
        self.trajectory.turns += 1
        self.trajectory.exact_tokens &= generation.exact_tokens
        if self.ctx.cfg.agent.thinking == "strip":
            self.trajectory.turn_samples.append(TurnSample(context, list(generation.token_ids), generation.logprobs))
        self.trajectory.append(generation.token_ids, True, generation.logprobs, generation.weight_version)
        self.messages.append({"role": "assistant", "content": generation.text})
        return generation

    def add_observation(self, observations: list[dict[str, Any]]) -> bool:
        """Append the observation messages' tokens (loss-masked) after the model's turn, ending that turn with eos
        when the model did not. False (and the trajectory finished with `context_overflow`) when they do not fit."""
        renderer = self.ctx.renderer
        ids = renderer.continuation_ids(observations)
        generated = self.trajectory.response_ids
        prefix = [] if generated and generated[-1] == renderer.eos_token_id else [renderer.eos_token_id]
        total = len(self.trajectory.prompt_ids) + len(generated) + len(prefix) + len(ids)
        self.messages.extend(observations)
        if total >= self.ctx.cfg.generator.max_prompt_length:
            self.finish("context_overflow", f"the observation would bring the context to {total} tokens")
            return False
        self.trajectory.append(prefix + ids, False)
        return True

    def _add_time(self, key: str, started: float) -> None:
        self.trajectory.timing[key] = self.trajectory.timing.get(key, 0.0) + time.monotonic() - started
