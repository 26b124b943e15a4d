"""OpenEnv tools: `reset` and `step` on any OpenEnv environment server, through `openenv-core`'s generic client.

OpenEnv (https://github.com/meta-pytorch/OpenEnv) serves Gym-style environments over a WebSocket API; its
`GenericEnvClient` speaks it with plain dicts, so no environment-specific package is needed here. One tool group is
one session (one environment instance on the server). Install with `pip install -e "./skyrl-gym[openenv]"`.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from skyrl_gym.tools.core import ToolGroup, ToolResult, tool

DEFAULT_TIMEOUT_S = 30.0


def observation_text(observation: Any) -> str:
    """An observation as compact JSON (its `done`/`reward`/`metadata` bookkeeping left out: the env reports those)."""
    if isinstance(observation, dict):
        observation = {k: v for k, v in observation.items() if k not in ("done", "reward", "metadata")}
    return json.dumps(observation, ensure_ascii=False, default=str)


class OpenEnvTools(ToolGroup):
    """`reset` and `step` on the OpenEnv server at `base_url` (http:// or ws://). Rewards and the done flag of the
    last call are kept in `last_reward`, `total_reward` and `done`. Connection failures are service errors."""

    def __init__(self, base_url: str, timeout_s: float = DEFAULT_TIMEOUT_S, name: str = "openenv") -> None:
        try:
            from openenv.core import GenericEnvClient
        except ImportError as exc:  # an optional dependency: say how to get it
            raise ImportError('OpenEnvTools needs openenv-core: pip install -e "./skyrl-gym[openenv]"') from exc
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(f"OpenEnvTools: base_url must be an http(s):// or ws(s):// URL, got {base_url!r}")
        self.base_url = base_url
        self.client = GenericEnvClient(base_url=base_url, message_timeout_s=timeout_s).sync()
        self.last_reward: Optional[float] = None
        self.total_reward = 0.0
        self.done = False
        self.steps = 0
        super().__init__(name)

    def _record(self, result: Any) -> str:
        self.last_reward = None if result.reward is None else float(result.reward)
        self.total_reward += self.last_reward or 0.0
        self.done = bool(result.done)
        return observation_text(result.observation)

    @tool
    def reset(self, seed: Optional[int] = None) -> ToolResult:
        """Start a new episode and return its first observation.

        Args:
            seed: Optional seed of the episode.
        """
        try:
            result = self.client.reset(**({} if seed is None else {"seed": seed}))
        except Exception as exc:  # the server is down or answered with an error
            return ToolResult(
                "reset", False, error=f"OpenEnv reset failed: {type(exc).__name__}: {exc}", service_error=True
            )
        self.total_reward, self.steps = 0.0, 0
        return ToolResult("reset", True, output=self._record(result), data=result.observation)

    @tool
    def step(self, action: dict) -> ToolResult:
        """Act in the environment and return the observation, reward and whether the episode is done.

        Args:
            action: The action as a JSON object, with the fields the environment expects.
        """
        if self.done:
            return ToolResult("step", False, error="the episode is over; call reset to start another")
        try:
            result = self.client.step(action)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            # a rejected action (validation) is the caller's fault; anything else is the service's
            service = "validation" not in text.lower() and "invalid" not in text.lower()
            return ToolResult("step", False, error=f"OpenEnv step failed: {text}", service_error=service)
        self.steps += 1
        text = self._record(result)
        return ToolResult(
            "step",
            True,
            output=f"{text}\nreward: {self.last_reward} done: {str(self.done).lower()}",
            data=result.observation,
        )

    def close(self) -> None:
        """Close the session."""
        self.client.close()
