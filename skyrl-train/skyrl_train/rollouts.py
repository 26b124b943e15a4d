"""The step's rollouts: generate, shape rewards (DAPO soft overlong punishment) and apply dynamic sampling.

`RolloutCollector.collect(items)` turns one batch of prompts into the trajectories a training step uses:

    generate (n samples per prompt) -> reward shaping -> dynamic sampling (DAPO `filter` or POLARIS `replace`)

With dynamic sampling a step may generate several batches ("rounds"), each drawn from the dataloader like a normal
step's batch, until enough prompt groups with reward variance are found (bounded by `max_sample_batches`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Optional

from skyrl_train.algorithms.dapo import soft_overlong_punishment, zero_variance_group_mask
from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.types import GeneratorInput, GeneratorOutput, Trajectory

logger = logging.getLogger(__name__)

REPLICA_UID_SEPARATOR = "#copy"
"""Separator of the uid suffix given to copies of a group made by `replace` dynamic sampling."""


class DynamicSamplingError(RuntimeError):
    """Dynamic sampling used `max_sample_batches` generation batches without filling the training batch."""


@dataclass
class Rollouts:
    """The trajectories of one training step and what producing them took."""

    output: GeneratorOutput
    """Trajectories to train on (for `filter`: the kept groups; for `replace`: with copies of informative groups)."""
    rounds: int = 1
    """Generation batches it took."""
    sampled_groups: int = 0
    """Prompt groups generated over all rounds (the cost)."""


def group_of(trajectory: Trajectory) -> str:
    """The group (prompt) id of a trajectory."""
    return trajectory.uid


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


def informative_groups(trajectories: list[Trajectory], tol: float = 1e-6) -> tuple[list[str], list[str]]:
    """(groups with reward variance, groups without) in order of first appearance. Invalid trajectories (env
    errors) do not count toward a group's variance; a group with no valid trajectory has none."""
    valid = [t for t in trajectories if t.is_valid]
    order = list(dict.fromkeys(group_of(t) for t in trajectories))
    if not valid:
        return [], order
    flat = zero_variance_group_mask([t.reward for t in valid], [group_of(t) for t in valid], tol).tolist()
    informative = {group_of(t) for t, zero in zip(valid, flat) if not zero}
    return [g for g in order if g in informative], [g for g in order if g not in informative]


def replace_uninformative_groups(
    trajectories: list[Trajectory], min_replace_ratio: float, rng: random.Random
) -> Optional[tuple[list[Trajectory], int]]:
    """POLARIS-style `replace` dynamic sampling: each group without reward variance is replaced by a copy of an
    informative group of the same batch, when informative groups are more than `min_replace_ratio` of all groups.

    Returns (trajectories, number of groups replaced), or None when too few groups are informative (the caller then
    samples another batch). Copies get the uid `<uid>#copy<k>` so each copy is its own group (same advantages as the
    original). Replacement groups are drawn without repeats while they last, then with repeats.
    """
    good, bad = informative_groups(trajectories)
    total = len(good) + len(bad)
    if not good or len(good) <= total * min_replace_ratio:
        return None
    if not bad:
        return list(trajectories), 0
    members = _members(trajectories)
    pool = rng.sample(good, len(good)) if len(bad) <= len(good) else [rng.choice(good) for _ in bad]
    replacement = dict(zip(bad, pool))
    copies_made: dict[str, int] = {}
    result: list[Trajectory] = []
    for group in dict.fromkeys(group_of(t) for t in trajectories):
        if group not in replacement:
            result.extend(members[group])
            continue
        source = replacement[group]
        copies_made[source] = copies_made.get(source, 0) + 1
        uid = f"{source}{REPLICA_UID_SEPARATOR}{copies_made[source]}"
        result.extend(_copy_trajectory(t, uid) for t in members[source])
    return result, len(bad)


def _copy_trajectory(trajectory: Trajectory, uid: str) -> Trajectory:
    return replace(
        trajectory,
        uid=uid,
        prompt_token_ids=list(trajectory.prompt_token_ids),
        response_ids=list(trajectory.response_ids),
        loss_mask=list(trajectory.loss_mask),
        token_rewards=list(trajectory.token_rewards),
        rollout_logprobs=None if trajectory.rollout_logprobs is None else list(trajectory.rollout_logprobs),
    )


class RolloutCollector:
    """Produces a step's trajectories from the generator, following `trainer.algorithm.dynamic_sampling` and
    `overlong_buffer`.

    `make_input(items, round)` builds the generator input of one round; `next_items()` draws another batch of prompts
    from the dataloader (None when the data ran out).
    """

    def __init__(
        self,
        cfg: Any,
        generator: GeneratorInterface,
        make_input: Callable[[list[dict[str, Any]], int], GeneratorInput],
        next_items: Callable[[], Optional[list[dict[str, Any]]]],
        score: Optional[Callable[[GeneratorInput, GeneratorOutput], Awaitable[dict[str, float]]]] = None,
    ) -> None:
        self.cfg = cfg
        self.generator = generator
        self.make_input = make_input
        self.next_items = next_items
        self.score = score
        algorithm = cfg.trainer.algorithm
        self.sampling = algorithm.dynamic_sampling
        self.overlong = algorithm.overlong_buffer
        limit = self.sampling.max_sample_batches
        self.max_rounds = limit if limit > 0 else 2**31 - 1
        self.rng = random.Random(cfg.trainer.seed)

    async def generate_round(self, items: list[dict[str, Any]], round_index: int) -> tuple[GeneratorOutput, dict]:
        """Generate one batch and shape its rewards; returns the output and the round's reward-shaping metrics."""
        generator_input = self.make_input(items, round_index)
        output = await self.generator.generate(generator_input)
        metrics: dict[str, float] = {}
        if self.score is not None:
            metrics.update(await self.score(generator_input, output))
        if self.overlong.enabled:
            limit = self.cfg.generator.sampling_params.max_generate_length
            metrics.update(
                apply_overlong_punishment(
                    output.trajectories, limit, self.overlong.length, self.overlong.penalty_factor
                )
            )
        return output, metrics

    async def collect(self, items: list[dict[str, Any]]) -> Rollouts:
        """The step's trajectories, starting from the prompts `items`."""
        kind = self.sampling.type
        if kind is None:
            return await self.collect_once(items)
        if kind == "filter":
            return await self._filter(items)
        if kind == "replace":
            return await self._replace(items)
        raise ValueError(f"trainer.algorithm.dynamic_sampling.type must be null, filter or replace, got {kind!r}")

    async def collect_once(self, items: list[dict[str, Any]]) -> Rollouts:
        """One generation round of `items` with its rewards shaped, whatever `dynamic_sampling` says (fully_async
        applies dynamic sampling to finished groups itself)."""
        output, metrics = await self.generate_round(items, 0)
        output.metrics.update(metrics)  # scoring and shaping metrics reach the step's metrics
        return Rollouts(output, 1, _group_count(output.trajectories))

    @staticmethod
    def sampling_metrics(rounds: float, sampled: int, kept: int, replaced: int) -> dict[str, float]:
        """The `dynamic_sampling/*` metrics of one step."""
        return {
            "dynamic_sampling/rounds": float(rounds),
            "dynamic_sampling/sampled_groups": float(sampled),
            "dynamic_sampling/kept_groups": float(kept),
            "dynamic_sampling/replaced_groups": float(replaced),
        }

    async def _filter(self, items: list[dict[str, Any]]) -> Rollouts:
        """DAPO: keep groups with reward variance, generate more batches until `train_batch_size` groups are kept
        (surplus groups of the last batch are dropped)."""
        target = self.cfg.trainer.train_batch_size
        kept: list[list[Trajectory]] = []
        outputs, shaping, sampled, rounds = [], [], 0, 0
        while len(kept) < target:
            if rounds >= self.max_rounds:
                raise self.filter_gave_up(len(kept))
            if rounds > 0:
                items = self.next_items()
                if items is None:
                    logger.warning(
                        "dynamic sampling: the training data ran out with %d of %d groups kept; training on them",
                        len(kept),
                        target,
                    )
                    break
            output, round_metrics = await self.generate_round(items, rounds)
            rounds += 1
            outputs.append(output)
            shaping.append(round_metrics)
            sampled += _group_count(output.trajectories)
            good, _ = informative_groups(output.trajectories)
            members = _members(output.trajectories)
            kept.extend([t for t in members[group] if t.is_valid] for group in good)
        trajectories = [t for group in kept[:target] for t in group]
        if not trajectories:  # no informative group at all before the data ran out: train on the last batch
            trajectories = outputs[-1].trajectories
        metrics = _mean_metrics(shaping)
        metrics.update(self.sampling_metrics(rounds, sampled, min(len(kept), target), 0))
        merged = _mean_metrics([output.metrics for output in outputs])
        return Rollouts(GeneratorOutput(trajectories, {**merged, **metrics}), rounds, sampled)

    async def _replace(self, items: list[dict[str, Any]]) -> Rollouts:
        """POLARIS: replace groups without variance by copies of informative ones when enough are informative,
        else sample another batch."""
        sampled, shaping = 0, []
        output = GeneratorOutput([])
        for round_index in range(self.max_rounds):
            if round_index > 0:
                next_items = self.next_items()
                if next_items is None:
                    logger.warning("dynamic sampling: the training data ran out; training on the last batch as it is")
                    metrics = {**_mean_metrics(shaping), **self.sampling_metrics(round_index, sampled, 0, 0)}
                    last = GeneratorOutput(output.trajectories, {**output.metrics, **metrics})
                    return Rollouts(last, round_index, sampled)
                items = next_items
            output, round_metrics = await self.generate_round(items, round_index)
            sampled += _group_count(output.trajectories)
            shaping.append(round_metrics)
            replaced = replace_uninformative_groups(output.trajectories, self.sampling.min_replace_ratio, self.rng)
            if replaced is not None:
                trajectories, count = replaced
                metrics = _mean_metrics(shaping)
                metrics.update(
                    self.sampling_metrics(round_index + 1, sampled, _group_count(trajectories) - count, count)
                )
                output = GeneratorOutput(trajectories, {**output.metrics, **metrics})
                return Rollouts(output, round_index + 1, sampled)
            logger.warning(
                "dynamic sampling (replace): at most %.0f%% of the groups have reward variance; sampling another batch",
                100 * self.sampling.min_replace_ratio,
            )
        raise self.replace_gave_up()

    def filter_gave_up(self, kept: int) -> DynamicSamplingError:
        """The error when `filter` used up `max_sample_batches` batches having kept only `kept` groups."""
        return DynamicSamplingError(
            f"dynamic sampling (filter) kept {kept} of the {self.cfg.trainer.train_batch_size} prompt groups a "
            f"training batch needs after trainer.algorithm.dynamic_sampling.max_sample_batches={self.max_rounds} "
            "generation batches: most prompts get the same reward on every sample. Raise max_sample_batches (-1 "
            "never gives up), use data of another difficulty, or raise generator.n_samples_per_prompt"
        )

    def replace_gave_up(self) -> DynamicSamplingError:
        """The error when `replace` found no batch informative enough in `max_sample_batches` batches."""
        return DynamicSamplingError(
            f"dynamic sampling (replace) found no batch where more than trainer.algorithm.dynamic_sampling."
            f"min_replace_ratio={self.sampling.min_replace_ratio} of the prompt groups have reward variance in "
            f"max_sample_batches={self.max_rounds} generation batches: lower min_replace_ratio, raise "
            "max_sample_batches, or check the data's difficulty"
        )


def _group_count(trajectories: list[Trajectory]) -> int:
    return len({group_of(t) for t in trajectories})


def _members(trajectories: list[Trajectory]) -> dict[str, list[Trajectory]]:
    members: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        members.setdefault(group_of(t), []).append(t)
    return members


def _mean_metrics(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Per metric, the mean over the rounds that report it."""
    keys = {key for metrics in rounds for key in metrics}
    return {key: sum(m[key] for m in rounds if key in m) / sum(key in m for m in rounds) for key in keys}
