"""Evaluation: roll out held-out prompts, report pass@n per data source and overall, and dump trajectories."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.metrics import pass_at_n
from skyrl_train.generators.types import GeneratorInput, GeneratorOutput, Trajectory
from skyrl_train.inference.types import SamplingParams


def build_eval_input(items: list[dict[str, Any]], n_samples: int, sampling_params: SamplingParams) -> GeneratorInput:
    """Repeat each dataset item `n_samples` times under one uid per item."""
    repeated = [item for item in items for _ in range(n_samples)]
    return GeneratorInput(
        prompts=[item["prompt"] for item in repeated],
        env_classes=[item["env_class"] for item in repeated],
        env_extras=[dict(item["env_extras"]) for item in repeated],
        uids=[str(item["uid"]) for item in repeated],
        sampling_params=replace(sampling_params, n=1),
        batch_metadata={"training_phase": "eval"},
    )


def eval_metrics(trajectories: list[Trajectory], n_samples: int) -> dict[str, float]:
    """`eval/<data_source>/{pass_at_<n>, mean_reward, env_errors}` per data source and `eval/all/...` overall.

    pass@n counts a prompt as solved when any of its samples reaches reward 1.0; with one sample it is accuracy.
    """
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[t.data_source or "unknown"].append(t)
    groups["all"] = list(trajectories)
    metrics: dict[str, float] = {}
    for source, members in groups.items():
        prefix = f"eval/{source}"
        metrics[f"{prefix}/pass_at_{n_samples}"] = pass_at_n(members)
        metrics[f"{prefix}/mean_reward"] = sum(t.reward for t in members) / len(members)
        metrics[f"{prefix}/env_errors"] = float(sum(not t.is_valid for t in members))
    return metrics


def dump_trajectories(
    trajectories: list[Trajectory], items_by_uid: dict[str, dict[str, Any]], path: Path, tokenizer: Any
) -> Path:
    """Write one jsonl line per trajectory: prompt, response, score, stop reason and the env extras."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for t in trajectories:
            item = items_by_uid.get(t.uid, {})
            record = {
                "uid": t.uid,
                "data_source": t.data_source,
                "prompt": item.get("prompt"),
                "response": tokenizer.decode(t.response_ids, skip_special_tokens=True),
                "score": t.reward,
                "stop_reason": t.stop_reason,
                "env_error": t.env_error,
                "env_extras": item.get("env_extras"),
            }
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    return path


async def evaluate(
    generator: GeneratorInterface,
    items: list[dict[str, Any]],
    sampling_params: SamplingParams,
    n_samples: int = 1,
    dump_path: Optional[Path] = None,
    tokenizer: Any = None,
    batch_size: Optional[int] = None,
    score: Optional[Callable[[GeneratorInput, GeneratorOutput], Awaitable[dict[str, float]]]] = None,
) -> dict[str, float]:
    """Run the eval prompts through the generator, `batch_size` prompts (each with its `n_samples`) per generate
    call (all at once when None); return the eval metrics and optionally dump the rollouts.

    `score` is the training run's reward scorer (`RewardScorer.score`): when given, it rescores every rollout
    before the metrics, exactly as training rollouts are rescored, and its `reward/*` metrics come back as
    `eval/reward/*`. Without it the env's rewards are reported."""
    if not items:
        return {}
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"evaluate: batch_size must be >= 1 or None, got {batch_size}")
    step = batch_size or len(items)
    trajectories: list[Trajectory] = []
    for start in range(0, len(items), step):
        output = await generator.generate(build_eval_input(items[start : start + step], n_samples, sampling_params))
        trajectories.extend(output.trajectories)
    scorer_metrics: dict[str, float] = {}
    if score is not None:
        # One call over every row: the chunks above bound the generator's batch, the scorer shards its own work.
        scored = GeneratorOutput(trajectories=trajectories)
        scorer_metrics = await score(build_eval_input(items, n_samples, sampling_params), scored)
    metrics = eval_metrics(trajectories, n_samples)
    metrics.update({f"eval/{name}": value for name, value in scorer_metrics.items()})
    if dump_path is not None and tokenizer is not None:
        dump_trajectories(trajectories, {str(i["uid"]): i for i in items}, dump_path, tokenizer)
    return metrics
