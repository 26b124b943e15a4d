"""`Task`: a dataset builder, the tools an instance comes with, the system prompt, and an evaluator."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Optional

from skyrl_gym.tools import ToolGroup

if TYPE_CHECKING:
    from skyrl_agent.trajectory import AgentTrajectory


class Task(abc.ABC):
    """A kind of problem an agent solves. Instances are dicts with at least `id` and `prompt` (the user message);
    the rest (the answer, a repository, a database path) is the task's own."""

    system_prompt: str = ""

    @abc.abstractmethod
    def build_dataset(self, size: int, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
        """`size` instances, the same for the same seed and split."""

    def tool_groups(self, instance: dict[str, Any]) -> list[ToolGroup]:
        """The tool groups one trajectory of `instance` uses (fresh per trajectory; closed after it)."""
        return []

    def workspace(self, groups: list[ToolGroup]) -> dict[str, Any]:
        """The state the evaluator needs from a finished trajectory's tool groups (none by default)."""
        return {}

    def user_message(self, instance: dict[str, Any]) -> str:
        """The first user message of a trajectory."""
        return str(instance["prompt"])

    @abc.abstractmethod
    def evaluate(self, instance: dict[str, Any], trajectory: AgentTrajectory) -> float:
        """The trajectory's reward (its `final_answer`, tool calls and messages are there to read)."""

    def check_instance(self, instance: Any, where: str) -> None:
        """Refuse an instance this task cannot run, saying `where` it came from and which field is wrong."""
        if not isinstance(instance, dict):
            raise ValueError(f"{where}: an instance must be a dict, got {type(instance).__name__}")
        for key in ("id", "prompt"):
            if key not in instance:
                raise ValueError(f"{where}: the instance has no {key!r} field (it has {sorted(instance)})")

    @staticmethod
    def parse_number(text: Optional[str]) -> Optional[float]:
        """The number `text` states (commas and spaces ignored), or None."""
        if text is None:
            return None
        try:
            return float(text.replace(",", "").strip())
        except ValueError:
            return None
