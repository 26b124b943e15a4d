"""Reward shaping applied to a generation round before it is trained on: DAPO's soft overlong punishment."""

from __future__ import annotations

from skyrl_train.algorithms.dapo import soft_overlong_punishment
from skyrl_train.generators.types import Trajectory


def apply_overlong_punishment(
    trajectories: list[Trajectory], max_response_len: int, buffer_len: int, penalty_factor: float
) -> dict[str, float]:
    """DAPO soft overlong punishment, in place: add the length penalty to the reward of every valid trajectory (on
    its last generated token) and return `reward/overlong_*` metrics. Length = the tokens the policy generated."""
    valid = [t for t in trajectories if t.is_valid and any(t.loss_mask)]
    if not valid:
        return {"reward/overlong_penalty_mean": 0.0, "reward/overlong_penalized": 0.0}
    lengths = [sum(t.loss_mask) for t in valid]
    penalties = soft_overlong_punishment(lengths, max_response_len, buffer_len, penalty_factor).tolist()
    for trajectory, penalty in zip(valid, penalties):
        last = max(i for i, m in enumerate(trajectory.loss_mask) if m)
        trajectory.token_rewards[last] += penalty
    return {
        "reward/overlong_penalty_mean": sum(penalties) / len(trajectories),
        "reward/overlong_penalized": float(sum(p < 0 for p in penalties)),
    }
