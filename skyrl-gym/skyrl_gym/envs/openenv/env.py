"""`OpenEnvEnv`: a multi-turn env that plays an OpenEnv environment served over HTTP/WebSocket.

`init` resets the remote environment and shows its first observation (JSON) after the prompt. Each model turn is
one action, `<action>{"field": ...}</action>` (a JSON object with the fields the environment's action expects); the
observation comes back as the next user message, the environment's reward is the step reward, and its done flag
ends the episode. A turn without a readable action gets a hint and no reward; a rejected action, the error text.

env_config keys: `base_url` (required), `timeout` (30 s per message), `max_turns` (8). extras: `seed` (passed to
reset, optional). Needs `pip install -e "./skyrl-gym[openenv]"`.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType
from skyrl_gym.tools.openenv import DEFAULT_TIMEOUT_S, OpenEnvTools
from skyrl_gym.tools.parsing import extract_tag

NO_ACTION_HINT = "No action found: reply with one <action>{...}</action> holding a JSON object."


class OpenEnvEnv(BaseTextEnv):
    """An OpenEnv environment, one session per episode (see the module docstring)."""

    config_keys = ("base_url", "timeout")

    default_max_turns = 8

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        base_url = self.env_config.get("base_url")
        if not base_url:
            raise ValueError(
                "OpenEnvEnv: env_config.base_url is required (the OpenEnv server, e.g. http://127.0.0.1:8000)"
            )
        self.tools = OpenEnvTools(base_url, timeout_s=self.env_config.get("timeout", DEFAULT_TIMEOUT_S))
        self.toolbox.add_group(self.tools)
        self.seed = (extras or {}).get("seed")
        self.bad_actions = 0

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Reset the remote environment; its first observation follows the prompt."""
        prompt, info = super().init(prompt)
        result = self.tools.call("reset", {} if self.seed is None else {"seed": self.seed})
        if not result.ok:
            raise RuntimeError(result.error)
        first = {"role": "user", "content": f"Observation: {result.output}"}
        return list(prompt) + [first], {**info, "observation": result.data}

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        body = extract_tag(action, "action")
        try:
            parsed = json.loads(body) if body is not None else None
        except json.JSONDecodeError as exc:
            parsed, problem = None, f"the action is not valid JSON ({exc.msg} at char {exc.pos})"
        else:
            problem = None if isinstance(parsed, dict) else NO_ACTION_HINT
        if parsed is None or problem:
            self.bad_actions += 1
            message = problem or NO_ACTION_HINT
            return {
                "observations": [{"role": "user", "content": message}],
                "reward": 0.0,
                "done": False,
                "metadata": {},
            }
        result = self.tools.call("step", {"action": parsed})
        if not result.ok:
            if result.service_error:
                raise RuntimeError(result.error)
            self.bad_actions += 1
            return {
                "observations": [{"role": "user", "content": result.error}],
                "reward": 0.0,
                "done": False,
                "metadata": {},
            }
        return {
            "observations": [] if self.tools.done else [{"role": "user", "content": f"Observation: {result.output}"}],
            "reward": float(self.tools.last_reward or 0.0),
            "done": self.tools.done,
            "metadata": {"openenv_steps": self.tools.steps},
        }

    def get_metrics(self) -> dict[str, Any]:
        """Steps, bad actions and the episode's total reward."""
        return {**super().get_metrics(), "bad_actions": self.bad_actions, "env_reward_total": self.tools.total_reward}
