"""Rollout metrics: rewards, pass@n, response lengths, stop reasons, env failures, per-env metrics, time split."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Optional

import skyrl_gym
from skyrl_train.generators.types import Trajectory


def pass_at_n(trajectories: list[Trajectory], threshold: float = 1.0) -> float:
    """Fraction of prompts (uids) with at least one sample whose reward reaches `threshold`."""
    return solved_share(rewards_by_uid(trajectories), threshold)


def rewards_by_uid(trajectories: list[Trajectory], rewards: Optional[list[float]] = None) -> dict[str, list[float]]:
    """Each prompt's (uid's) sample rewards, in order; `rewards` when the trajectories' are already at hand."""
    groups: dict[str, list[float]] = {}
    for t, reward in zip(trajectories, rewards if rewards is not None else (t.reward for t in trajectories)):
        groups.setdefault(t.uid, []).append(reward)
    return groups


def solved_share(groups: dict[str, list[float]], threshold: float = 1.0) -> float:
    """Fraction of the groups with at least one reward reaching `threshold` (0 for no groups)."""
    return sum(max(rewards) >= threshold for rewards in groups.values()) / len(groups) if groups else 0.0


def rollout_metrics(trajectories: list[Trajectory], llm_seconds: float, env_seconds: float) -> dict[str, float]:
    """Aggregate metrics of one batch of final trajectories (one per episode)."""
    if not trajectories:
        return {}
    count = len(trajectories)
    lengths = [len(t.response_ids) for t in trajectories]
    generated = [sum(t.loss_mask) for t in trajectories]
    metrics: dict[str, float] = {
        "generate/reward_mean": sum(t.reward for t in trajectories) / count,
        "generate/pass_at_n": pass_at_n(trajectories),
        "generate/response_length_mean": sum(lengths) / count,
        "generate/response_length_max": float(max(lengths)),
        "generate/generated_tokens": float(sum(generated)),
        "generate/turns_mean": sum(t.num_turns for t in trajectories) / count,
        "generate/env_errors": float(sum(not t.is_valid for t in trajectories)),
        "generate/filtered": float(sum(t.filtered is not None for t in trajectories)),
        "generate/llm_seconds": llm_seconds,
        "generate/env_seconds": env_seconds,
    }
    for reason, n in Counter(t.stop_reason for t in trajectories).items():
        metrics[f"generate/stop_reason/{reason}"] = n / count
    by_env: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in trajectories:
        if t.env_metrics:
            by_env[t.env_class].append(t.env_metrics)
    for env_class, episodes in by_env.items():
        aggregate = _env_aggregator(env_class)
        for key, value in aggregate(episodes).items():
            metrics[f"environment/{env_class}/{key}"] = float(value)
    return metrics


def _env_aggregator(env_class: str):
    try:
        factory = skyrl_gym.spec(env_class).load()
        return getattr(factory, "aggregate_metrics", skyrl_gym.BaseTextEnv.aggregate_metrics)
    except Exception:
        return skyrl_gym.BaseTextEnv.aggregate_metrics
