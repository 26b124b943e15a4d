"""Rollout sources: what feeds each training step its rollouts, one per `trainer.mode`.

The trainer's loop is the same for every mode (`RayPPOTrainer.run_steps`):

    source.start(step, max_steps)
    while step < max_steps:
        taken = source.next(step + 1, weight_version)   # the step's rollouts (None: the data ran out)
        step += 1; learn(taken.rollouts); source.before_publish(); publish the weights
        source.done(taken, trained_version)             # prompts used up; the source's metrics
    source.stop()

- `SyncSource` (`sync`): generates the step's batch when asked, then the step trains on it.
- `OneStepOffSource` (`one_step_off`): the batch of step k starts as soon as the weights of step k - 2 are served,
  so it generates while steps k - 1 and k train; no token is more than one version old.
- `FullyAsyncSource` (`fully_async`, in `rollouts.fully_async`): a producer keeps generating prompt groups into a
  buffer within a staleness bound; each step takes `train_batch_size` finished groups.

Each source composes a `PromptSource` (which prompts, checkpointed), a `RolloutCollector` (generation, rewards,
dynamic sampling) and `rollouts.inputs.make_generator_input` (seeds and uids from explicit arguments).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from skyrl_train.generators.types import GeneratorInput
from skyrl_train.rollouts.collector import DrawMore, MakeInput, RolloutCollector, Rollouts
from skyrl_train.rollouts.inputs import make_generator_input, step_uid_prefix
from skyrl_train.rollouts.prompts import PromptSource
from skyrl_train.utils.timer import PhaseTimer


@dataclass
class StepRollouts:
    """What a source hands one training step: its rollouts, the keys of the prompts they used, the step's timer
    (a sync source already timed the generation in it) and what the source measured meanwhile."""

    rollouts: Rollouts
    keys: list[int]
    timer: PhaseTimer = field(default_factory=PhaseTimer)
    metrics: dict[str, float] = field(default_factory=dict)
    group_versions: Optional[list[int]] = None
    """fully_async: the oldest weight version of each group's tokens (for its staleness)."""


class RolloutSource(Protocol):
    """The loop's view of a source (see the module docstring)."""

    async def start(self, step: int, max_steps: int) -> None:
        """Begin before the loop's first step (`step`: steps already done)."""

    async def next(self, step: int, weight_version: int) -> Optional[StepRollouts]:
        """Rollouts for training step `step` while the engines serve `weight_version`; None when the data ran out."""

    async def before_publish(self, timer: PhaseTimer) -> None:
        """Wait for what must finish before the step's weights replace the engines' ones."""

    async def done(self, taken: StepRollouts, trained_version: int) -> dict[str, float]:
        """The step trained on `taken` (starting from weights `trained_version`) and published: its metrics."""

    async def stop(self) -> None:
        """End any generation still running (its envs closed) before the run tears down."""


def staleness_metrics(staleness: list[int], dropped: int, throttled_s: float, idle_s: float) -> dict[str, float]:
    """`async/*` metrics of one step: staleness of the trained groups (mean, max, histogram), groups dropped for
    staleness, seconds generation waited for capacity (one_step_off: the engines' wait between finishing one batch
    and starting the next), seconds the trainer waited for data."""
    counts = Counter(staleness)
    metrics = {
        "async/staleness_mean": sum(staleness) / max(len(staleness), 1),
        "async/staleness_max": float(max(staleness, default=0)),
        "async/dropped_stale_groups": float(dropped),
        "async/throttled_seconds": throttled_s,
        "timing/trainer_idle": idle_s,
    }
    for gap in range(max(counts, default=0) + 1):
        metrics[f"async/staleness_hist_{gap}"] = float(counts.get(gap, 0))
    return metrics


class StepBatches:
    """Generator inputs of a step's batches: seed key and uid prefix from the step (`rollouts.inputs`)."""

    def __init__(self, cfg: Any) -> None:
        self.n_samples = cfg.generator.n_samples_per_prompt
        self.base_seed = cfg.generator.sampling_params.seed

    def for_step(self, step: int) -> MakeInput:
        """`(items, round) -> GeneratorInput` for the batches generated as step `step`'s."""

        def make_input(items: list[dict[str, Any]], round_index: int) -> GeneratorInput:
            metadata = {"global_step": step, "training_phase": "train", "round": round_index}
            prefix = step_uid_prefix(step, round_index)
            return make_generator_input(items, self.n_samples, self.base_seed, step, round_index, prefix, metadata)

        return make_input


def draw_more(prompts: PromptSource, keys: list[int]) -> DrawMore:
    """Dynamic sampling's extra batches: drawn from `prompts`, their keys added to `keys`."""

    def more() -> Optional[list[dict[str, Any]]]:
        drawn = prompts.draw_batch()
        if drawn is None:
            return None
        keys.extend(key for key, _ in drawn)
        return [item for _, item in drawn]

    return more


class SyncSource:
    """`trainer.mode=sync`: each step generates its own batch, seeded by the step."""

    def __init__(self, cfg: Any, prompts: PromptSource, collector: RolloutCollector) -> None:
        self.prompts, self.collector = prompts, collector
        self.batches = StepBatches(cfg)

    async def start(self, step: int, max_steps: int) -> None:
        """Nothing runs ahead of the steps."""

    async def next(self, step: int, weight_version: int) -> Optional[StepRollouts]:
        """Draw a batch and generate it (timed as the step's `generate` phase)."""
        drawn = self.prompts.draw_batch()
        if drawn is None:
            return None
        keys = [key for key, _ in drawn]
        timer = PhaseTimer()
        with timer("step"), timer("generate"):
            items = [item for _, item in drawn]
            rollouts = await self.collector.collect(items, self.batches.for_step(step), draw_more(self.prompts, keys))
        return StepRollouts(rollouts, keys, timer)

    async def before_publish(self, timer: PhaseTimer) -> None:
        """Nothing is generating."""

    async def done(self, taken: StepRollouts, trained_version: int) -> dict[str, float]:
        """The step used up its prompts."""
        self.prompts.use(taken.keys)
        return {}

    async def stop(self) -> None:
        """Nothing is running."""


class OneStepOffSource:
    """`trainer.mode=one_step_off`: every batch is at most one version old; the batch of step k starts generating as
    soon as the weights published by step k - 2 are served, so two batches generate at once.

    The batch trained at step s is seeded by s - 1 (as when it was generated during step s - 1 only). Step k's sync
    lands in batch k + 1's running rollouts at the engines' weight-update boundary (their later tokens come from the
    newer weights, so they are then 0 versions old); every token records its version. With the two oldest batches
    started before the first step, a step never waits for a batch that could have started earlier."""

    def __init__(self, cfg: Any, prompts: PromptSource, collector: RolloutCollector) -> None:
        self.prompts, self.collector = prompts, collector
        self.batches = StepBatches(cfg)
        self.max_steps = 0
        self.pending: dict[int, asyncio.Task] = {}
        """Step -> the task generating its batch."""
        self.next_batch = 1
        """The step whose batch starts next."""
        self.finished_at = 0.0
        """When the last batch finished generating."""

    async def start(self, step: int, max_steps: int) -> None:
        """Start generating the batches of the next two steps."""
        self.max_steps, self.next_batch = max_steps, step + 1
        for _ in range(2):
            self._start_batch()

    def _start_batch(self) -> None:
        """Draw and start generating the next step's batch (nothing past `max_steps` or the data)."""
        step, self.next_batch = self.next_batch, self.next_batch + 1
        drawn = self.prompts.draw_batch() if step <= self.max_steps else None
        if drawn:
            self.pending[step] = asyncio.create_task(self._generate(drawn, step - 1))

    async def _generate(
        self, drawn: list[tuple[int, dict[str, Any]]], seed_step: int
    ) -> tuple[Rollouts, float, list[int]]:
        """The batch's rollouts, the seconds generating it took and the keys of every prompt it used (dynamic
        sampling's extra batches included)."""
        keys = [key for key, _ in drawn]
        start = time.perf_counter()
        items = [item for _, item in drawn]
        rollouts = await self.collector.collect(items, self.batches.for_step(seed_step), draw_more(self.prompts, keys))
        self.finished_at = time.perf_counter()
        return rollouts, self.finished_at - start, keys

    async def next(self, step: int, weight_version: int) -> Optional[StepRollouts]:
        """Step `step`'s batch, when generated."""
        task = self.pending.pop(step, None)
        if task is None:
            return None
        waited = time.perf_counter()
        rollouts, generate_s, keys = await task
        metrics = {"idle": time.perf_counter() - waited, "generate": generate_s}
        return StepRollouts(rollouts, keys, metrics=metrics)

    async def before_publish(self, timer: PhaseTimer) -> None:
        """The sync meets the running batch at the engines' weight-update boundary."""

    async def done(self, taken: StepRollouts, trained_version: int) -> dict[str, float]:
        """Prompts used up, staleness of the trained rollouts and the source's timings; the batch two steps ahead
        starts now that this step's weights are served (`async/throttled_seconds`: how long the engines had no
        batch to generate before it)."""
        self.prompts.use(taken.keys)
        generating = any(not task.done() for task in self.pending.values())
        throttled = 0.0 if generating else time.perf_counter() - self.finished_at
        self._start_batch()
        staleness = [trained_version - t.oldest_version for t in taken.rollouts.output.trajectories]
        measured = taken.metrics
        metrics = staleness_metrics(staleness, 0, throttled, measured["idle"])
        metrics["timing/generate"] = measured["generate"]
        return metrics

    async def stop(self) -> None:
        """Cancel the batches still generating and wait for them to end (their envs close)."""
        tasks = list(self.pending.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.pending = {}
