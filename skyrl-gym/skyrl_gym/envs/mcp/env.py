"""`MCPEnv`: a multi-turn env whose tools come from MCP servers; the model calls them in `<tool_call>` blocks and ends
with `<answer>`.

env_config keys:
- `servers` (required): `{name: {"transport": "stdio", "command": ..., "args": [...], "env": {...}, "cwd": ...}}` or
  `{name: {"transport": "http", "url": ..., "headers": {...}}}`, plus optional `connect_timeout` (30 s),
  `call_timeout` (60 s), `tools` (the server tool names to expose) and `max_output_chars` (4000: one result's text).
  Tools are named `<server>__<tool>`.
- `tools_in_system_prompt` (False): also describe the tools and the call format in the system message.
- `partial_credit` (False): reward the fraction of conditions met instead of all-or-nothing.
- `max_tool_calls_per_turn` (4), `max_observation_chars` (4000), `max_turns` (5).

Ground truth: `{"answer": str, "required_tools": [names]}`, either optional but not both; see `reward.py`.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType, final_step, reply_step
from skyrl_gym.envs.mcp.reward import parse_ground_truth, score_episode, tool_was_called
from skyrl_gym.errors import ToolError
from skyrl_gym.tools.mcp.config import parse_server_configs
from skyrl_gym.tools.mcp.group import MCPToolGroup
from skyrl_gym.tools.parsing import ParsedToolCall, extract_tag, parse_tool_calls
from skyrl_gym.tools.toolbox import Toolbox

_CONFIG_KEYS = (
    "servers",
    "tools_in_system_prompt",
    "partial_credit",
    "max_tool_calls_per_turn",
    "max_observation_chars",
)

NO_ACTION_HINT = (
    'No tool call or answer found. Call a tool with <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call> '
    "or give your final answer as <answer>...</answer>."
)


class MCPEnv(BaseTextEnv):
    """Tool use over MCP servers: reward 1.0 iff the answer matches and every required tool was called successfully.

    `init` connects the configured servers (reusing connections that are still up from an earlier episode of this
    env), returns `info["tools"]` (the OpenAI-format schemas a chat template takes) and, with
    `tools_in_system_prompt`, adds a tool description to the system message. Each turn the model either calls tools,
    `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (several per turn, up to `max_tool_calls_per_turn`),
    getting one `{"role": "tool", "name": ..., "content": ...}` message per call, or answers with
    `<answer>...</answer>`, which ends the episode (tool calls in that turn are not run). The reward is computed when
    the model answers or on the last allowed turn. `close` ends every session and stops stdio server processes.
    """

    default_max_turns = 5
    config_keys = _CONFIG_KEYS

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        config = self.env_config
        self.server_configs = parse_server_configs(config.get("servers"))
        self.tools_in_system_prompt = _flag(config, "tools_in_system_prompt")
        self.partial_credit = _flag(config, "partial_credit")
        self.max_tool_calls_per_turn = _positive_int(config, "max_tool_calls_per_turn", 4)
        self.max_observation_chars = _positive_int(config, "max_observation_chars", 4000)
        self.truth = parse_ground_truth(self.ground_truth())
        self.groups: dict[str, MCPToolGroup] = {}
        self._reset_tallies()

    def _reset_tallies(self) -> None:
        self.tool_calls: list[dict[str, Any]] = []
        self.tool_errors = 0
        self.successful_tools: list[str] = []
        self.answered = False

    # ----- episode start ----------------------------------------------------------------------------------------
    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Connect the servers, check the required tools exist, and return the prompt and `{"tools": schemas}`.

        Raises `MCPConnectionError` when a server cannot be reached (an infrastructure failure, not the model's).
        """
        self._begin_episode()
        self._reset_tallies()
        self._connect_servers()
        self._check_required_tools()
        schemas = self.toolbox.schemas()
        if self.tools_in_system_prompt:
            prompt = with_tools_in_system_message(prompt, schemas, self.max_tool_calls_per_turn)
        return prompt, {"tools": schemas}

    def _connect_servers(self) -> None:
        changed = False
        for name, config in self.server_configs.items():
            group = self.groups.get(name)
            if group is not None and group.connected and group.ping():
                continue
            if group is not None:
                group.close()
                del self.groups[name]
            self.groups[name] = MCPToolGroup(name, config)
            changed = True
        if changed:
            self.toolbox = Toolbox()
            for name in self.server_configs:
                self.toolbox.add_group(self.groups[name])

    def _check_required_tools(self) -> None:
        available = self.toolbox.qualified_names()
        missing = [name for name in self.truth.required_tools if not tool_was_called(name, available)]
        if missing:
            raise ValueError(
                f"reward_spec.ground_truth.required_tools names {missing}, which no configured MCP server offers; "
                f"available tools: {available}"
            )

    # ----- one turn ---------------------------------------------------------------------------------------------
    def _step(self, action: str) -> BaseTextEnvStepOutput:
        answer = extract_tag(action, "answer")
        calls = parse_tool_calls(action)
        if answer is not None:
            return self._finish(answer, {"ignored_tool_calls": len(calls)} if calls else {})
        if not calls:
            if self.is_last_turn:
                return self._finish(None, {"no_answer": True})
            return reply_step(NO_ACTION_HINT, {"no_action": True, "tool_calls": [], "errors": []})
        observations, records = [], []
        for call in calls[: self.max_tool_calls_per_turn]:
            message, record = self._run_call(call)
            observations.append(message)
            records.append(record)
        metadata: dict[str, Any] = {"tool_calls": records, "errors": [r["error"] for r in records if not r["ok"]]}
        skipped = len(calls) - self.max_tool_calls_per_turn
        if skipped > 0:  # one message for the excess, so a flood of calls cannot flood the context
            error = f"skipped {skipped} tool call(s): at most {self.max_tool_calls_per_turn} are run per turn"
            observations.append({"role": "tool", "name": "skipped_tool_calls", "content": f"Error: {error}"})
            metadata["errors"].append(error)
            metadata["skipped_tool_calls"] = skipped
            self.tool_errors += 1
        if self.is_last_turn:
            return self._finish(None, {**metadata, "no_answer": True})
        return BaseTextEnvStepOutput(
            observations=observations, reward=0.0, done=False, metadata=metadata, postprocessed_action=None
        )

    def _run_call(self, call: ParsedToolCall) -> tuple[dict[str, str], dict[str, Any]]:
        name = call.name or "invalid_tool_call"
        if call.error is not None:
            ok, error, text = False, call.error, ""
        else:
            try:
                group, tool = self.toolbox.resolve(call.name)
                name = f"{group.name}__{tool}"
            except ToolError:
                pass  # toolbox.call reports the unknown name with the list of available tools
            result = self.toolbox.call(call.name, call.arguments)
            ok, error, text = result.ok, result.error, result.output
            if ok and name not in self.successful_tools:
                self.successful_tools.append(name)
        content = text if ok else f"Error: {error}"
        record = {"name": name, "arguments": call.arguments, "ok": ok, "error": error}
        self.tool_calls.append(record)
        self.tool_errors += int(not ok)
        message = {"role": "tool", "name": name, "content": self._clip(content)}
        return message, record

    def _clip(self, text: str) -> str:
        limit = self.max_observation_chars
        if len(text) <= limit:
            return text
        return f"{text[:limit]}\n... [truncated {len(text) - limit} characters]"

    def _finish(self, answer: Optional[str], metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        self.answered = answer is not None
        reward, conditions = score_episode(self.truth, answer, self.successful_tools, self.partial_credit)
        metadata = {
            "tool_calls": [],
            "errors": [],
            **metadata,
            "answer": answer,
            "conditions": conditions,
            "successful_tools": list(self.successful_tools),
            "total_tool_calls": len(self.tool_calls),
            "total_tool_errors": self.tool_errors,
        }
        return final_step(reward, metadata)

    def close(self) -> None:
        """Close the toolbox and every server connection this env opened (also those a failed `init` left out of the
        toolbox). Idempotent."""
        try:
            super().close()
        finally:
            for group in self.groups.values():
                group.close()

    # ----- metrics ----------------------------------------------------------------------------------------------
    def get_metrics(self) -> dict[str, Any]:
        """Base metrics (`turns`, `episode_reward`) plus `tool_calls`, `tool_errors` and `answered`."""
        metrics = super().get_metrics()
        metrics.update(tool_calls=len(self.tool_calls), tool_errors=self.tool_errors, answered=self.answered)
        return metrics


def with_tools_in_system_message(
    prompt: ConversationType, schemas: list[dict[str, Any]], max_calls: int
) -> ConversationType:
    """Return a copy of the prompt whose system message (added first if there is none) ends with the tool list and
    the call / answer format."""
    listing = "\n".join(json.dumps(schema, ensure_ascii=False) for schema in schemas)
    text = (
        f"You can call these tools:\n<tools>\n{listing}\n</tools>\n"
        'To call a tool, write <tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>; '
        f"you may make up to {max_calls} calls in one turn. Each result comes back as a tool message. "
        "When you are done, give your final answer as <answer>...</answer>."
    )
    messages = [dict(message) for message in prompt]
    if messages and messages[0].get("role") == "system":
        messages[0]["content"] = f"{messages[0]['content']}\n\n{text}" if messages[0]["content"] else text
    else:
        messages.insert(0, {"role": "system", "content": text})
    return messages


def _flag(config: dict[str, Any], key: str) -> bool:
    value = config.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"MCPEnv: env_config '{key}' must be true or false, got {value!r}")
    return value


def _positive_int(config: dict[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"MCPEnv: env_config '{key}' must be a positive integer, got {value!r}")
    return value
