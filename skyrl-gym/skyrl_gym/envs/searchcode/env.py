"""`SearchCodeEnv`: multi-turn math QA with a search tool and a sandboxed Python tool, called in SkyRL's tag format.

Each turn the model either calls one tool, `<tool><search>query</search></tool>` (the retrieval server's best
passages) or `<tool><python>code</python></tool>` (the program runs in the sandbox and its output comes back), and
reads the tool's text as a user message; or it ends the episode with `<solution>...</solution>`. Only the first
`<tool>` block of a turn runs; the first tag inside it names the tool, bare (`search`, `python`) or qualified
(`search__search`, `sandbox__python`), and its stripped content is the query or the program.

Reward, given on the turn that ends the episode (a solution, or the last allowed turn, where no tool runs): the gsm8k
strict rule over the model's own turns joined by newlines, i.e. the number after the last `####` compared exactly
with `reward_spec.ground_truth` (a number or numeric string): 1.0 if equal, else 0.0. Tool outputs are not scored.

Failures: no tool call, an unknown tool, an empty query or program, and a program that fails are observations for
the model (metadata `tool_error`). A search server that stays down through the client's retries (or answers with an
HTTP error or garbage), or a sandbox that cannot run programs, ends the episode as a failed step
(`metadata.env_error`, kind `tool_unavailable`, see `skyrl_gym.failed_step`) instead of a zero reward.

env_config keys: `search_url`, `topk`, `timeout`, `max_attempts`, `backoff_base`, `backoff_max` (as in the `search`
env), `sandbox` (a mapping of `SandboxLimits` fields for the python tool; default: a 10 s time limit) and `max_turns`
(default 2). Unknown keys are an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Optional

from skyrl_gym.envs.base_text_env import (
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
    final_step,
    reply_step,
)
from skyrl_gym.errors import ToolError
from skyrl_gym.guard import failed_step
from skyrl_gym.rewards.numbers import extract_gsm8k_answer, numbers_match, parse_ground_truth_number
from skyrl_gym.sandbox import SandboxLimits
from skyrl_gym.tools.core import ToolResult
from skyrl_gym.tools.parsing import extract_tag
from skyrl_gym.tools.python import DEFAULT_TIMEOUT_S as PYTHON_TIMEOUT_S
from skyrl_gym.tools.python import PythonToolGroup
from skyrl_gym.tools.search import SearchToolGroup
from skyrl_gym.tools.toolbox import SEPARATOR

ENV_KEYS = ("search_url", "topk", "timeout", "max_attempts", "backoff_base", "backoff_max", "sandbox", "max_turns")
TOOL_UNAVAILABLE = "tool_unavailable"
NO_TOOL_HINT = (
    "No tool call or solution found. Call a tool with <tool><search>query</search></tool> or "
    "<tool><python>code</python></tool>, or give your final answer as <solution>...</solution>."
)
EMPTY_TOOL_HINT = (
    "The <tool> block names no tool. Write <tool><search>query</search></tool> or <tool><python>code</python></tool>."
)

_TOOL_BLOCK = re.compile(r"<tool>(.*?)</tool>", re.DOTALL)
_INNER_TAG = re.compile(r"<(\w+)>(.*?)</\1>", re.DOTALL)


def parse_tool_tag(action: str) -> tuple[str, str]:
    """(tool name, stripped input) of the first `<tool><name>input</name></tool>` call in `action`.

    Raises ValueError with a message for the model when there is no `<tool>` block or no tag inside it.
    """
    block = _TOOL_BLOCK.search(action)
    if block is None:
        raise ValueError(NO_TOOL_HINT)
    inner = _INNER_TAG.search(block.group(1))
    if inner is None:
        raise ValueError(EMPTY_TOOL_HINT)
    return inner.group(1), inner.group(2).strip()


class SearchCodeEnv(BaseTextEnv):
    """Search and Python tools, `<solution>` to finish; reward 1.0 when the final `#### N` equals the ground truth."""

    default_max_turns = 2

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        config = self.env_config
        unknown = sorted(set(config) - set(ENV_KEYS))
        if unknown:
            raise ValueError(f"SearchCodeEnv env_config has unknown keys {unknown}; allowed: {list(ENV_KEYS)}")
        sandbox = config.get("sandbox") or {}
        if not isinstance(sandbox, Mapping):
            raise ValueError(
                f"SearchCodeEnv env_config 'sandbox' must be a mapping of SandboxLimits fields, got {sandbox!r}"
            )
        limits = SandboxLimits.from_mapping(
            {"timeout_s": PYTHON_TIMEOUT_S, **sandbox}, where="SearchCodeEnv env_config 'sandbox'"
        )
        self.toolbox.add_group(SearchToolGroup.from_env_config(config))
        self.toolbox.add_group(PythonToolGroup(limits))
        self._target: Optional[Fraction] = None
        self._reset_tallies()

    def _reset_tallies(self) -> None:
        self.responses: list[str] = []
        self.tool_calls: dict[str, int] = {}
        self.tool_errors = 0
        self.answered = False
        self.correct = False

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start an episode; reads `reward_spec.ground_truth` as a number (ValueError naming the field if it is not)."""
        self._begin_episode()
        self._target = parse_ground_truth_number(self.ground_truth())
        self._reset_tallies()
        return prompt, {}

    def _finish(self, metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        """End the episode, scoring the model's turns with the gsm8k strict rule."""
        assert self._target is not None  # set by init
        pred = extract_gsm8k_answer("\n".join(self.responses), "strict")
        self.correct = numbers_match(pred, self._target)
        metadata.update(pred=pred, correct=self.correct)
        return final_step(1.0 if self.correct else 0.0, metadata)

    def _call_tool(self, name: str, argument: str) -> tuple[ToolResult, str]:
        """Call a one-argument tool by bare or qualified name; return its result and qualified name. An unknown
        name comes back as a failed result (and the name as written)."""
        try:
            group, tool_name = self.toolbox.resolve(name)
        except ToolError as exc:
            return ToolResult(name, False, error=str(exc)), name
        (parameter,) = group.get_tool(tool_name).parameters["properties"]  # both tools take one string
        self.tool_calls[tool_name] = self.tool_calls.get(tool_name, 0) + 1
        return group.call(tool_name, {parameter: argument}), f"{group.name}{SEPARATOR}{tool_name}"

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        self.responses.append(action)
        solution = extract_tag(action, "solution")
        if solution is not None:
            self.answered = True
            return self._finish({"solution": solution})
        if self.is_last_turn:
            return self._finish({"truncated": True, "no_solution": True})
        metadata: dict[str, Any] = {}
        try:
            name, argument = parse_tool_tag(action)
        except ValueError as exc:
            self.tool_errors += 1
            metadata["tool_error"] = str(exc)
            content = str(exc)
        else:
            result, qualified = self._call_tool(name, argument)
            if result.service_error:
                return failed_step(f"SearchCodeEnv: the {qualified} tool failed: {result.error}", TOOL_UNAVAILABLE)
            metadata.update(tool=qualified, tool_input=argument)
            if not result.ok:
                self.tool_errors += 1
                metadata["tool_error"] = result.error
            content = result.text
        return reply_step(content, metadata)

    def get_metrics(self) -> dict[str, Any]:
        """Base metrics plus `searches`, `python_calls`, `tool_errors`, `answered` and `correct`."""
        metrics = super().get_metrics()
        metrics.update(
            searches=self.tool_calls.get("search", 0),
            python_calls=self.tool_calls.get("python", 0),
            tool_errors=self.tool_errors,
            answered=self.answered,
            correct=self.correct,
        )
        return metrics
