"""What a generator takes and returns: `GeneratorInput`, `Trajectory` and `GeneratorOutput`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from skyrl_train.inference.types import Messages, SamplingParams


@dataclass
class GeneratorInput:
    """A batch of prompts to roll out; samples of one prompt share a `uid` (the trainer repeats prompts n times).

    `env_extras[i]` are row i's other dataset columns (reward_spec, extra_info, data_source, ...).
    `sampling_params` overrides the generator's default (e.g. greedy for eval).
    """

    prompts: list[Messages]
    env_classes: list[str]
    env_extras: list[dict[str, Any]]
    uids: list[str]
    sampling_params: Optional[SamplingParams] = None
    batch_metadata: dict[str, Any] = field(default_factory=dict)
    seeds: Optional[list[int]] = None
    """Per-trajectory sampling seeds (turn t uses `seed + t`): rollouts then do not depend on how the engine batches
    requests, so a run (and a resumed run) is reproducible."""

    def __post_init__(self) -> None:
        sizes = {
            "prompts": len(self.prompts),
            "env_classes": len(self.env_classes),
            "env_extras": len(self.env_extras),
            "uids": len(self.uids),
        }
        if self.seeds is not None:
            sizes["seeds"] = len(self.seeds)
        if len(set(sizes.values())) != 1:
            raise ValueError(f"GeneratorInput fields must have one entry per prompt; got lengths {sizes}")


@dataclass
class Trajectory:
    """One rollout, token-in/token-out: `response_ids` are exactly the engine's tokens plus tokenized observations.

    `loss_mask` is 1 exactly on the tokens the policy generated (0 on observation and template tokens), whatever
    happens to the trajectory afterwards; `token_rewards` has one entry per response token (each turn's reward on
    that turn's last generated token); `reward` is their sum. `rollout_logprobs` are the engine's logprobs (0.0 on
    observation tokens). `rollout_top_logprobs` (when sampling asked for `logprobs: k > 0`) holds, per response
    token, the engine's k most likely `(token_id, logprob)` pairs at that step (an empty list on observation tokens).
    `env_error` is set when the env failed: the trajectory is then invalid, kept out of the loss and out of its
    group's advantage statistics, and counted in the metrics. `filtered` names why a valid trajectory is kept out of
    the loss (e.g. `"overlong"` for DAPO overlong filtering); its reward still counts in its group's statistics.
    """

    uid: str
    env_class: str
    prompt_token_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    token_rewards: list[float]
    rollout_logprobs: Optional[list[float]]
    stop_reason: str
    num_turns: int
    weight_version: int
    env_metrics: dict[str, Any] = field(default_factory=dict)
    env_error: Optional[dict[str, Any]] = None
    filtered: Optional[str] = None
    data_source: Optional[str] = None
    step_index: int = 0
    is_last_step: bool = True
    response_text: str = ""
    rollout_top_logprobs: Optional[list[list[tuple[int, float]]]] = None
    token_versions: Optional[list[int]] = None
    """Per response token, the weight version that generated it (-1 on observation tokens); turns of one rollout
    may differ when the weights change between them (`trainer.mode=fully_async`). None: all are `weight_version`."""

    @property
    def oldest_version(self) -> int:
        """The oldest weight version among the tokens the policy generated (`weight_version` when not recorded)."""
        if self.token_versions is None:
            return self.weight_version
        generated = [v for v, m in zip(self.token_versions, self.loss_mask) if m and v >= 0]
        return min(generated) if generated else self.weight_version

    @property
    def reward(self) -> float:
        """The trajectory's return: the sum of its token rewards."""
        return float(sum(self.token_rewards))

    @property
    def is_valid(self) -> bool:
        """False when the env failed: the trajectory is neither trained on nor part of its group's statistics."""
        return self.env_error is None

    @property
    def is_trained(self) -> bool:
        """True when the loss uses this trajectory's generated tokens: valid and not filtered."""
        return self.is_valid and self.filtered is None


@dataclass
class GeneratorOutput:
    """The rollouts of a batch, in input order (or turn order within a prompt for step-wise output), and metrics."""

    trajectories: list[Trajectory]
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def rewards(self) -> list[float]:
        """Each trajectory's return."""
        return [t.reward for t in self.trajectories]

    def __len__(self) -> int:
        return len(self.trajectories)
