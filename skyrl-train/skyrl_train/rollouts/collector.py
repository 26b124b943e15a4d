"""`RolloutCollector`: one batch of prompts in, the trajectories a step trains on out.

    generate (n samples per prompt) -> score and shape rewards -> dynamic sampling (`filter` or `replace`)

With dynamic sampling a step may generate several batches ("rounds"), each drawn like a normal step's batch by the
`draw_more` callable its caller passes, until enough prompt groups with reward variance are found (bounded by
`max_sample_batches`). The caller also passes `make_input(items, round)`, which builds each round's generator input
(`rollouts.inputs.make_generator_input` with the caller's seed key and uid prefix).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Optional

from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.types import GeneratorInput, GeneratorOutput, Trajectory
from skyrl_train.rollouts.dynamic_sampling import DynamicSampling, group_count, group_members
from skyrl_train.rollouts.shaping import apply_overlong_punishment

logger = logging.getLogger(__name__)

MakeInput = Callable[[list[dict[str, Any]], int], GeneratorInput]
"""`(prompts, round) -> GeneratorInput` of one generation round."""
DrawMore = Callable[[], Optional[list[dict[str, Any]]]]
"""Another batch of prompts for dynamic sampling's next round; None when the data ran out."""
Score = Callable[[GeneratorInput, GeneratorOutput], Awaitable[dict[str, float]]]
"""Scores a round's trajectories in place (reward managers, reward models); returns `reward/*` metrics."""


@dataclass
class Rollouts:
    """The trajectories of one training step and what producing them took."""

    output: GeneratorOutput
    """Trajectories to train on (for `filter`: the kept groups; for `replace`: with copies of informative groups)."""
    rounds: int = 1
    """Generation batches it took."""
    sampled_groups: int = 0
    """Prompt groups generated over all rounds (the cost)."""


def merge_rollouts(parts: list[Rollouts]) -> Rollouts:
    """One step's rollouts from several groups: trajectories concatenated, metrics averaged over the groups."""
    trajectories = [t for part in parts for t in part.output.trajectories]
    metrics = mean_metrics([part.output.metrics for part in parts])
    return Rollouts(GeneratorOutput(trajectories, metrics), 1, sum(part.sampled_groups for part in parts))


def mean_metrics(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Per metric, the mean over the dicts that report it."""
    keys = {key for metrics in rounds for key in metrics}
    return {key: sum(m[key] for m in rounds if key in m) / sum(key in m for m in rounds) for key in keys}


class RolloutCollector:
    """Produces a step's trajectories from the generator, following `trainer.algorithm.dynamic_sampling` and
    `overlong_buffer`; `score` (when given) rewards each round first."""

    def __init__(
        self, cfg: Any, generator: GeneratorInterface, sampling: DynamicSampling, score: Optional[Score] = None
    ) -> None:
        self.cfg = cfg
        self.generator = generator
        self.sampling = sampling
        self.score = score
        self.overlong = cfg.trainer.algorithm.overlong_buffer

    async def generate_round(self, generator_input: GeneratorInput) -> tuple[GeneratorOutput, dict[str, float]]:
        """Generate one batch and shape its rewards; returns the output and the round's reward-shaping metrics."""
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

    async def collect(self, items: list[dict[str, Any]], make_input: MakeInput, draw_more: DrawMore) -> Rollouts:
        """The step's trajectories, starting from the prompts `items` (more rounds as dynamic sampling needs)."""
        kind = self.sampling.kind
        if kind is None:
            return await self.collect_once(make_input(items, 0))
        if kind == "filter":
            return await self._filter(items, make_input, draw_more)
        if kind == "replace":
            return await self._replace(items, make_input, draw_more)
        raise ValueError(f"trainer.algorithm.dynamic_sampling.type must be null, filter or replace, got {kind!r}")

    async def collect_once(self, generator_input: GeneratorInput) -> Rollouts:
        """One generation round with its rewards shaped, whatever `dynamic_sampling` says (fully_async applies
        dynamic sampling to finished groups itself)."""
        output, metrics = await self.generate_round(generator_input)
        output.metrics.update(metrics)  # scoring and shaping metrics reach the step's metrics
        return Rollouts(output, 1, group_count(output.trajectories))

    async def _filter(self, items: list[dict[str, Any]], make_input: MakeInput, draw_more: DrawMore) -> Rollouts:
        """DAPO: keep groups with reward variance, generate more batches until `train_batch_size` groups are kept
        (surplus groups of the last batch are dropped)."""
        target = self.sampling.batch_size
        kept: list[list[Trajectory]] = []
        outputs, shaping, sampled, rounds = [], [], 0, 0
        while len(kept) < target:
            if rounds >= self.sampling.max_rounds:
                raise self.sampling.filter_gave_up(len(kept))
            if rounds > 0:
                items = draw_more()
                if items is None:
                    logger.warning(
                        "dynamic sampling: the training data ran out with %d of %d groups kept; training on them",
                        len(kept),
                        target,
                    )
                    break
            output, round_metrics = await self.generate_round(make_input(items, rounds))
            rounds += 1
            outputs.append(output)
            shaping.append(round_metrics)
            sampled += group_count(output.trajectories)
            selection = self.sampling.select(output.trajectories)
            kept.extend(group_members(selection.trajectories).values())
        trajectories = [t for group in kept[:target] for t in group]
        if not trajectories:  # no informative group at all before the data ran out: train on the last batch
            trajectories = outputs[-1].trajectories
        metrics = mean_metrics(shaping)
        metrics.update(self.sampling.metrics(rounds, sampled, min(len(kept), target), 0))
        merged = mean_metrics([output.metrics for output in outputs])
        return Rollouts(GeneratorOutput(trajectories, {**merged, **metrics}), rounds, sampled)

    async def _replace(self, items: list[dict[str, Any]], make_input: MakeInput, draw_more: DrawMore) -> Rollouts:
        """POLARIS: replace groups without variance by copies of informative ones when enough are informative,
        else sample another batch."""
        sampled, shaping = 0, []
        output = GeneratorOutput([])
        for round_index in range(self.sampling.max_rounds):
            if round_index > 0:
                next_items = draw_more()
                if next_items is None:
                    logger.warning("dynamic sampling: the training data ran out; training on the last batch as it is")
                    metrics = {**mean_metrics(shaping), **self.sampling.metrics(round_index, sampled, 0, 0)}
                    last = GeneratorOutput(output.trajectories, {**output.metrics, **metrics})
                    return Rollouts(last, round_index, sampled)
                items = next_items
            output, round_metrics = await self.generate_round(make_input(items, round_index))
            sampled += group_count(output.trajectories)
            shaping.append(round_metrics)
            selection = self.sampling.select(output.trajectories)
            if selection is not None:
                metrics = mean_metrics(shaping)
                kept = selection.groups - selection.replaced
                metrics.update(self.sampling.metrics(round_index + 1, sampled, kept, selection.replaced))
                output = GeneratorOutput(selection.trajectories, {**output.metrics, **metrics})
                return Rollouts(output, round_index + 1, sampled)
            logger.warning(
                "dynamic sampling (replace): at most %.0f%% of the groups have reward variance; sampling another batch",
                100 * self.sampling.min_replace_ratio,
            )
        raise self.sampling.replace_gave_up()
