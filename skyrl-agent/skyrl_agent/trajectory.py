"""`AgentTrajectory`: what one agent run returns, token-in/token-out, and its form as a skyrl_train `Trajectory`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from skyrl_agent.tool_runner import ToolCallRecord


@dataclass
class TurnSample:
    """One model turn as a training sample of its own (`agent.thinking=strip`: each turn's context is re-rendered)."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: Optional[list[float]]


@dataclass
class AgentTrajectory:
    """One trajectory: `prompt_ids` and `response_ids` exactly as sampled and observed (the model's tokens, then
    each observation's tokens), `loss_mask` 1 only on the model's tokens, `logprobs` per response token (0.0 on
    observation tokens; None if the backend reports none), the reward, why it stopped, its turns, tool calls and
    errors, and wall time per stage."""

    instance_id: str
    index: int
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: Optional[list[float]] = field(default_factory=list)
    token_versions: list[int] = field(default_factory=list)
    reward: float = 0.0
    stop_reason: str = ""
    turns: int = 0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    final_answer: Optional[str] = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    exact_tokens: bool = True
    turn_samples: list[TurnSample] = field(default_factory=list)
    timing: dict[str, float] = field(default_factory=dict)
    workspace: dict[str, Any] = field(default_factory=dict)
    """What the task's tools left behind for its evaluator (`Task.workspace`; e.g. mini_swe's edited files)."""

    @property
    def wall_time_s(self) -> float:
        """Seconds from the trajectory's start to its evaluation's end."""
        return self.timing.get("wall_s", 0.0)

    @property
    def response_text(self) -> str:
        """The model's turns joined (for reading, not training)."""
        return "\n".join(m["content"] for m in self.messages if m["role"] == "assistant")

    def append(
        self, ids: list[int], generated: bool, logprobs: Optional[list[float]] = None, version: int = -1
    ) -> None:
        """Add response tokens: the model's own (`generated`, with their logprobs) or an observation's."""
        self.response_ids.extend(ids)
        self.loss_mask.extend([1 if generated else 0] * len(ids))
        self.token_versions.extend([version if generated else -1] * len(ids))
        if self.logprobs is not None:
            if generated and logprobs is None:
                self.logprobs = None
            else:
                self.logprobs.extend(logprobs if generated else [0.0] * len(ids))

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly digest (for logs and example output)."""
        return {
            "instance_id": self.instance_id,
            "index": self.index,
            "reward": self.reward,
            "stop_reason": self.stop_reason,
            "turns": self.turns,
            "tool_calls": [{"name": c.name, "ok": c.ok, "seconds": round(c.seconds, 3)} for c in self.tool_calls],
            "errors": self.errors,
            "final_answer": self.final_answer,
            "wall_time_s": round(self.wall_time_s, 3),
        }
