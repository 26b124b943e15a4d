"""`FullyAsyncSource` (`trainer.mode=fully_async`): a producer keeps generating prompt groups into a buffer.

A group is one prompt x `n_samples_per_prompt`, seeded by its key (`rollouts.inputs.FULLY_ASYNC_SEED_KEY + key`). A
new group starts only while `started < (steps done + lookahead) * train_batch_size`, where the lookahead is what
keeps the trainer busy (`Lookahead`: 1 + ceil(group latency / trainer step), measured) but at most
`max_staleness + 1`, so no group is older than `max_staleness` versions when trained; one that still is (a slow
multi-turn rollout) is dropped and its prompt generated again. A weight sync meets running rollouts at
`async_rl.weight_update_boundary`: each generated token records the version that sampled it (`token_versions`), so a
rollout may span versions.

Dynamic sampling applies to finished groups as a step takes them (`select_groups`): `filter` leaves out each group
without reward variance and waits for another; `replace` fills the taken batch with copies of its informative groups,
or leaves the whole batch out and takes another.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Optional

from skyrl_train.rollouts.collector import RolloutCollector, Rollouts, merge_rollouts
from skyrl_train.rollouts.dynamic_sampling import DynamicSampling
from skyrl_train.rollouts.inputs import FULLY_ASYNC_SEED_KEY, group_uid_prefix, make_generator_input
from skyrl_train.rollouts.prompts import PromptSource
from skyrl_train.rollouts.sources import StepRollouts, staleness_metrics
from skyrl_train.utils.timer import PhaseTimer

logger = logging.getLogger(__name__)


@dataclass
class GroupRollout:
    """One finished prompt group (`index`: its prompt's key in the `PromptSource`)."""

    rollouts: Rollouts
    index: int

    @property
    def oldest_version(self) -> int:
        """The oldest weight version among the group's generated tokens."""
        return min(t.oldest_version for t in self.rollouts.output.trajectories)


class Lookahead:
    """How many steps' worth of groups the producer may have started ahead of the trainer.

    The trainer consumes a batch per step of `T` seconds and a group takes `L` seconds from start to finish, so a
    step period of `T` (a trainer that never waits) needs `1 + ceil(L / T)` batches started ahead; fewer leave the
    trainer idle, more only make the data older. Both are exponential moving averages of what the run measures
    (`smoothing` weight on the newest), and the result is kept within `[1, max_staleness + 1]`; before the first
    measurements it is `min(2, max_staleness + 1)`."""

    def __init__(self, max_staleness: int, smoothing: float = 0.3) -> None:
        self.cap = max_staleness + 1
        self.smoothing = smoothing
        self.group_seconds: Optional[float] = None
        self.step_seconds: Optional[float] = None

    def _average(self, current: Optional[float], value: float) -> float:
        return value if current is None else (1 - self.smoothing) * current + self.smoothing * value

    def note_group(self, seconds: float) -> None:
        """A group took `seconds` from its start to its end."""
        self.group_seconds = self._average(self.group_seconds, seconds)

    def note_step(self, seconds: float) -> None:
        """The trainer was busy `seconds` with one step (from taking its batch to publishing its weights)."""
        self.step_seconds = self._average(self.step_seconds, seconds)

    @property
    def batches(self) -> int:
        """Batches of groups the producer may have started beyond the steps done."""
        if self.group_seconds is None or self.step_seconds is None:
            return min(2, self.cap)
        needed = 1 + math.ceil(self.group_seconds / max(self.step_seconds, 1e-3))
        return max(1, min(self.cap, needed))


class FullyAsyncSource:
    """The producer, its buffer and the staleness bound (see the module docstring)."""

    def __init__(self, cfg: Any, prompts: PromptSource, collector: RolloutCollector, sampling: DynamicSampling) -> None:
        self.prompts, self.collector, self.sampling = prompts, collector, sampling
        self.n_samples = cfg.generator.n_samples_per_prompt
        self.base_seed = cfg.generator.sampling_params.seed
        self.batch_size = cfg.trainer.train_batch_size
        self.max_staleness = cfg.trainer.async_rl.max_staleness
        self.step = 0
        """The step the trainer is on (recorded in each group's batch metadata)."""
        self.buffer: asyncio.Queue = asyncio.Queue()
        self.capacity = asyncio.Condition()
        self.started = self.steps_done = 0
        self.throttled_s = 0.0
        self.producer: Optional[asyncio.Task] = None
        self.lookahead = Lookahead(self.max_staleness)
        self.taken_at = 0.0

    async def start(self, step: int, max_steps: int) -> None:
        """Start the producer."""
        self.step = step
        self.producer = asyncio.create_task(self._produce())

    async def next(self, step: int, weight_version: int) -> Optional[StepRollouts]:
        """`train_batch_size` finished groups within the staleness bound, after dynamic sampling."""
        waited = time.perf_counter()
        taken = await self._take_batch(weight_version)
        if taken is None:
            return None
        groups, rollouts, dropped, sampling_counts = taken
        idle = time.perf_counter() - waited
        throttled, self.throttled_s = self.throttled_s, 0.0
        self.step, self.taken_at = step, time.perf_counter()
        metrics = {"dropped": float(dropped), "throttled": throttled, "idle": idle, **sampling_counts}
        versions = [group.oldest_version for group in groups]
        return StepRollouts(rollouts, [group.index for group in groups], metrics=metrics, group_versions=versions)

    async def before_publish(self, timer: PhaseTimer) -> None:
        """Generation goes on while the weights move (the engines pause at the configured boundary)."""

    async def done(self, taken: StepRollouts, trained_version: int) -> dict[str, float]:
        """Prompts used up, staleness and dynamic-sampling metrics; a step done lets more groups start."""
        self.prompts.use(taken.keys)
        measured = dict(taken.metrics)
        dropped, throttled, idle = measured.pop("dropped"), measured.pop("throttled"), measured.pop("idle")
        staleness = [trained_version - version for version in taken.group_versions or []]
        metrics = staleness_metrics(staleness, int(dropped), throttled, idle)
        metrics.update(measured)
        self.lookahead.note_step(time.perf_counter() - self.taken_at)
        metrics["async/lookahead_steps"] = float(self.lookahead.batches - 1)
        async with self.capacity:
            self.steps_done += 1
            self.capacity.notify_all()
        return metrics

    async def stop(self) -> None:
        """Cancel the producer (it cancels and awaits its running groups)."""
        if self.producer is not None:
            self.producer.cancel()
            await asyncio.gather(self.producer, return_exceptions=True)

    # ----- taking groups ------------------------------------------------------------------------------------------
    async def _take_batch(
        self, trained_version: int
    ) -> Optional[tuple[list[GroupRollout], Rollouts, int, dict[str, float]]]:
        """The step's groups and rollouts, the count of stale groups dropped and the `dynamic_sampling/*` metrics;
        None when generation ended without enough groups."""
        kind = self.sampling.kind
        groups: list[GroupRollout] = []
        dropped = sampled = rounds = 0
        while True:
            while len(groups) < self.batch_size:
                group = await self._next_group()
                if group is None:
                    if kind is not None:
                        logger.warning("dynamic sampling: the training data ran out with %d groups kept", len(groups))
                    return None
                gap = trained_version - group.oldest_version
                if gap > self.max_staleness:
                    dropped += 1
                    logger.info(
                        "dropped group %d: %d versions old (max_staleness %d)", group.index, gap, self.max_staleness
                    )
                    await self._release(group, again=True)
                    continue
                sampled += 1
                if kind == "filter":
                    selection = self.sampling.select(group.rollouts.output.trajectories)
                    if not selection.groups:  # no reward variance: no signal to train on
                        await self._release(group, again=False)
                        if sampled >= self.sampling.max_rounds * self.batch_size:
                            raise self.sampling.filter_gave_up(len(groups))
                        continue
                    group.rollouts.output.trajectories = selection.trajectories
                groups.append(group)
            rounds += 1
            merged = merge_rollouts([group.rollouts for group in groups])
            merged.sampled_groups = sampled  # the cost includes the groups dynamic sampling left out
            if kind is None:
                return groups, merged, dropped, {}
            if kind == "filter":
                return (
                    groups,
                    merged,
                    dropped,
                    self.sampling.metrics(sampled / self.batch_size, sampled, len(groups), 0),
                )
            selection = self.sampling.select(merged.output.trajectories)
            if selection is not None:
                merged.output.trajectories = selection.trajectories
                counts = self.sampling.metrics(rounds, sampled, len(groups) - selection.replaced, selection.replaced)
                return groups, merged, dropped, counts
            for group in groups:
                await self._release(group, again=False)
            groups = []
            if rounds >= self.sampling.max_rounds:
                raise self.sampling.replace_gave_up()
            logger.warning(
                "dynamic sampling (replace): at most %.0f%% of the groups have reward variance; taking another batch",
                100 * self.sampling.min_replace_ratio,
            )

    async def _next_group(self) -> Optional[GroupRollout]:
        """The next finished group; None when generation ended and the buffer is empty. A failed group or producer
        raises here."""
        producer = self.producer
        while True:
            if producer.done() and self.buffer.empty():
                if not producer.cancelled() and producer.exception() is not None:
                    raise producer.exception()
                return None
            getter = asyncio.create_task(self.buffer.get())
            done, _ = await asyncio.wait({getter, producer}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                continue
            group = getter.result()
            if isinstance(group, Exception):
                raise RuntimeError(f"fully_async generation of a prompt group failed: {group}") from group
            return group

    async def _release(self, group: GroupRollout, again: bool) -> None:
        """Let go of a group that will not be trained, freeing its place: its prompt is generated `again` (dropped
        for staleness) or used up (left out by dynamic sampling)."""
        self.prompts.release(group.index, again)
        async with self.capacity:
            self.started -= 1
            self.capacity.notify_all()

    # ----- producing groups ---------------------------------------------------------------------------------------
    def _allowed(self) -> bool:
        return self.started < (self.steps_done + self.lookahead.batches) * self.batch_size

    async def _produce(self) -> None:
        """Start groups while the staleness bound allows; each finished group goes into the buffer. Returns when the
        data ran out and nothing is running."""
        running: set[asyncio.Task] = set()
        try:
            while True:
                async with self.capacity:
                    waited = time.perf_counter()
                    await self.capacity.wait_for(self._allowed)
                    self.throttled_s += time.perf_counter() - waited
                pair = self.prompts.draw()
                if pair is None:
                    if not running:
                        return
                    await asyncio.sleep(0.05)  # a dropped group may come back to be generated again
                    continue
                self.started += 1
                task = asyncio.create_task(self._run_group(*pair))
                running.add(task)
                task.add_done_callback(running.discard)
        finally:  # groups still generating end here, their envs closed, before the run tears down the env pool
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _run_group(self, key: int, item: dict[str, Any]) -> None:
        """Generate one group into the buffer (a failure goes there too, so the trainer raises it)."""
        metadata = {"global_step": self.step, "training_phase": "train", "round": 0, "group": key}
        seed_key = FULLY_ASYNC_SEED_KEY + key
        generator_input = make_generator_input(
            [item], self.n_samples, self.base_seed, seed_key, 0, group_uid_prefix(key), metadata
        )
        started = time.perf_counter()
        try:
            rollouts = await self.collector.collect_once(generator_input)  # dynamic sampling: when it is taken
        except Exception as exc:  # noqa: BLE001 - handed to the trainer, which raises it
            await self.buffer.put(exc)
            return
        await self.buffer.put(GroupRollout(rollouts, key))
        async with self.capacity:  # a longer group latency may let the producer start more
            self.lookahead.note_group(time.perf_counter() - started)
            self.capacity.notify_all()
