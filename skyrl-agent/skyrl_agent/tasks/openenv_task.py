"""`openenv`: play any OpenEnv environment server as an agent task, with skyrl-gym's OpenEnv tools.

Each trajectory opens its own session on the server at `base_url`; the model calls `reset` (with the instance's
seed, which the prompt gives) and then `step` with actions as JSON objects, reading each observation, until the
environment says done. The reward is the environment's total reward over the session. `prompt` is the task text the
model reads (what the environment is and what its actions look like). Needs `pip install -e "./skyrl-gym[openenv]"`.
"""

from __future__ import annotations

import random
from typing import Any

from skyrl_agent.registry import register_task
from skyrl_agent.tasks.base import Task
from skyrl_agent.trajectory import AgentTrajectory
from skyrl_gym.tools import ToolGroup
from skyrl_gym.tools.openenv import OpenEnvTools


@register_task("openenv", builtin=True)
class OpenEnvTask(Task):
    """Episodes of the OpenEnv environment at `base_url` (see the module docstring)."""

    system_prompt = "Call reset with the given seed, then step until the environment is done."

    def __init__(self, base_url: str, prompt: str = "Play the environment.", timeout_s: float = 30.0) -> None:
        self.base_url, self.prompt, self.timeout_s = base_url, prompt, timeout_s

    def build_dataset(self, size: int, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
        """`size` episodes, each with its own reset seed."""
        rng = random.Random(f"openenv/{split}/{seed}")
        rows = []
        for index in range(size):
            episode_seed = rng.randrange(1 << 30)
            rows.append(
                {
                    "id": f"{split}-{seed}-{index}",
                    "prompt": f"{self.prompt} Seed: {episode_seed}.",
                    "seed": episode_seed,
                }
            )
        return rows

    def tool_groups(self, instance: dict[str, Any]) -> list[ToolGroup]:
        """A session of its own on the server."""
        return [OpenEnvTools(self.base_url, timeout_s=self.timeout_s)]

    def workspace(self, groups: list[ToolGroup]) -> dict[str, Any]:
        """The session's total reward, whether it ended, and its steps."""
        tools = next(group for group in groups if isinstance(group, OpenEnvTools))
        return {"total_reward": tools.total_reward, "done": tools.done, "steps": tools.steps}

    def evaluate(self, instance: dict[str, Any], trajectory: AgentTrajectory) -> float:
        """The environment's total reward."""
        return float(trajectory.workspace["total_reward"])
