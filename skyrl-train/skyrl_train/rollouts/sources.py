"""Rollout sources: what feeds each training step its rollouts, one per `trainer.mode`.

The trainer's loop is the same for every mode (`RayPPOTrainer.run_steps`):

    source.start(step, max_steps)
    while step < max_steps:
        taken = source.next(step + 1, weight_version)   # the step's rollouts (None: the data ran out)
        step += 1; learn(taken.rollouts); source.before_publish(); publish the weights
        source.done(taken, trained_version)             # prompts used up; the source's metrics
    source.stop()

- `SyncSource` (`sync`): generates the step's batch when asked, then the step trains on it.
- `OneStepOffSource` (`one_step_off`): while the step trains on batch k, the engines generate batch k+1 with the
  weights from before update k; the sync waits for it (`before_publish`), so every batch is one version old.
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
    """`trainer.mode=one_step_off`: batch k+1 generates while step k trains, with the weights from before update k.

    The batch trained at step s is generated during step s - 1 (the first one before the loop), seeded by s - 1."""

    def __init__(self, cfg: Any, prompts: PromptSource, collector: RolloutCollector) -> None:
        self.prompts, self.collector = prompts, collector
        self.batches = StepBatches(cfg)
        self.max_steps = 0
        self.pending: Optional[asyncio.Task] = None

    async def start(self, step: int, max_steps: int) -> None:
        """Start generating the first step's batch."""
        self.max_steps = max_steps
        drawn = self.prompts.draw_batch() if step < max_steps else None
        self.pending = asyncio.create_task(self._generate(drawn, step)) if drawn else None

    async def _generate(
        self, drawn: list[tuple[int, dict[str, Any]]], seed_step: int
    ) -> tuple[Rollouts, float, float, list[int]]:
        """The batch's rollouts, the seconds generating it took, the clock when it finished, and the keys of every
        prompt it used (dynamic sampling's extra batches included)."""
        keys = [key for key, _ in drawn]
        start = time.perf_counter()
        items = [item for _, item in drawn]
        rollouts = await self.collector.collect(items, self.batches.for_step(seed_step), draw_more(self.prompts, keys))
        finished = time.perf_counter()
        return rollouts, finished - start, finished, keys

    async def next(self, step: int, weight_version: int) -> Optional[StepRollouts]:
        """The batch generated during the last step; the next one starts generating at once."""
        if self.pending is None:
            return None
        waited = time.perf_counter()
        rollouts, generate_s, generated_at, keys = await self.pending
        idle = time.perf_counter() - waited
        drawn = self.prompts.draw_batch() if step < self.max_steps else None
        throttled = time.perf_counter() - generated_at  # the engines wait until the sync lets the next batch start
        self.pending = asyncio.create_task(self._generate(drawn, step)) if drawn else None
        metrics = {"throttled": throttled, "idle": idle, "generate": generate_s}
        return StepRollouts(rollouts, keys, metrics=metrics)

    async def before_publish(self, timer: PhaseTimer) -> None:
        """Batch k+1 must be generated by the weights from before update k."""
        if self.pending is not None:
            with timer("wait_generation"):
                await asyncio.wait({self.pending})

    async def done(self, taken: StepRollouts, trained_version: int) -> dict[str, float]:
        """Prompts used up; staleness of the trained rollouts and the source's timings."""
        self.prompts.use(taken.keys)
        staleness = [trained_version - t.oldest_version for t in taken.rollouts.output.trajectories]
        measured = taken.metrics
        metrics = staleness_metrics(staleness, 0, measured["throttled"], measured["idle"])
        metrics["timing/generate"] = measured["generate"]
        return metrics

    async def stop(self) -> None:
        """Cancel the batch still generating and wait for it to end (its envs close)."""
        if self.pending is not None:
            self.pending.cancel()
            await asyncio.gather(self.pending, return_exceptions=True)
            self.pending = None
