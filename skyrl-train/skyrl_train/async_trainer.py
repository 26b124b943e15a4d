"""`AsyncPPOTrainer`: the asynchronous loops (`trainer.mode` one_step_off and fully_async) over the synchronous
trainer's phases.

Both reuse `RayPPOTrainer.learn` (rewards -> log-probs -> KL -> advantages -> updates) unchanged; only what feeds it
and when the weights move differ:

- **one_step_off**: while the workers train on batch k, the engines generate batch k+1 with the weights from before
  update k. The sync waits for that generation, then moves the weights: every batch is exactly one version old.
- **fully_async**: a producer keeps generating prompt groups (one prompt x `n_samples_per_prompt`) into a buffer;
  the trainer takes `train_batch_size` finished groups, trains, and syncs while the next groups are being generated.
  A sync meets running rollouts at `async_rl.weight_update_boundary`: `token` (hf) lands between two tokens (the
  engine rebuilds the running rows' KV cache with the new weights), `turn` waits for in-flight generate calls. Either
  way a rollout may span versions: each generated token records the version that sampled it (`token_versions`) and
  its logprob under that version. A new group starts only while
  `started < (steps done + max_staleness + 1) * train_batch_size`, so no group is older than `max_staleness` versions
  when trained; one that still is (a slow multi-turn rollout) is dropped and its prompt generated again.

Dynamic sampling (`trainer.algorithm.dynamic_sampling`) works in both: one_step_off runs the sync trainer's
`RolloutCollector` on each batch, drawing its extra batches through `draw_prompt`; fully_async applies it to finished
groups as the trainer takes them (`filter`: a group without reward variance is left out and its place goes to a new
prompt; `replace`: a batch of groups is filled with copies of its informative ones, or left out whole).

Data accounting: prompts drawn from the dataloader but not trained yet (in flight, buffered, or dropped for
staleness) are kept in the checkpoint (`pending_prompts`) and generated again first on resume, so a killed run
loses and duplicates no prompt; prompts dynamic sampling left out are used up, as in the sync trainer. The buffered
rollouts themselves are not checkpointed: they are regenerated.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional

from skyrl_train.generators.types import GeneratorInput, GeneratorOutput
from skyrl_train.rollouts import Rollouts, informative_groups, replace_uninformative_groups
from skyrl_train.trainer import RayPPOTrainer
from skyrl_train.utils.timer import PhaseTimer

logger = logging.getLogger(__name__)

_GROUP_INDEX: contextvars.ContextVar[Optional[int]] = contextvars.ContextVar("skyrl_async_group", default=None)
"""Set inside a fully_async group's task: seeds and uids then follow the group's index, not the step."""

_BATCH_KEYS: contextvars.ContextVar[Optional[list[int]]] = contextvars.ContextVar("skyrl_async_batch", default=None)
"""Set inside a one_step_off generation task: the keys of the prompts it drew (dynamic sampling draws more)."""


@dataclass
class GroupRollout:
    """One finished prompt group of fully_async generation (`index`: its key in `AsyncPPOTrainer.pending`)."""

    rollouts: Rollouts
    index: int

    @property
    def oldest_version(self) -> int:
        """The oldest weight version among the group's generated tokens."""
        return min(t.oldest_version for t in self.rollouts.output.trajectories)


def merge_rollouts(parts: list[Rollouts]) -> Rollouts:
    """One step's rollouts from several groups: trajectories concatenated, metrics averaged over the groups."""
    trajectories = [t for part in parts for t in part.output.trajectories]
    keys = {key for part in parts for key in part.output.metrics}
    metrics = {}
    for key in keys:
        values = [part.output.metrics[key] for part in parts if key in part.output.metrics]
        metrics[key] = sum(values) / len(values)
    return Rollouts(GeneratorOutput(trajectories, metrics), 1, sum(part.sampled_groups for part in parts))


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


class AsyncPPOTrainer(RayPPOTrainer):
    """`RayPPOTrainer` with the one_step_off and fully_async loops (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mode = self.cfg.trainer.mode
        if self.mode not in ("one_step_off", "fully_async"):
            raise ValueError(f"AsyncPPOTrainer runs trainer.mode one_step_off or fully_async, got {self.mode!r}")
        self.max_staleness = 1 if self.mode == "one_step_off" else self.cfg.trainer.async_rl.max_staleness
        self.batch_size = self.cfg.trainer.train_batch_size
        self.pending: dict[int, dict[str, Any]] = {}
        """Prompts drawn (by a key) but not trained yet: checkpointed, generated again first on resume."""
        self._requeued: list[dict[str, Any]] = []
        self._next_key = 0
        self._local_batch: list[dict[str, Any]] = []
        self.used_uids: list[list[str]] = []
        """Per step of this process, the dataset uids of the prompts it used up: trained on, or generated and left
        out by dynamic sampling (for tests and debugging)."""
        self._used_now: list[str] = []
        self.rollouts.next_items = self._draw_more  # dynamic sampling's extra batches are drawn (and kept) here

    # ----- checkpointed state ---------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The sync trainer's state plus the prompts taken from the dataloader but not trained yet (in flight,
        buffered, dropped for staleness, or not started): they are generated again first on resume."""
        untrained = [*self.pending.values(), *self._requeued, *self._local_batch]
        return {**super().state(), "pending_prompts": untrained}

    def restore_state(self, state: Optional[dict[str, Any]]) -> None:
        """Also queue the checkpoint's untrained prompts to be generated first."""
        super().restore_state(state)
        if state:
            self._requeued = [dict(item) for item in state.get("pending_prompts") or []]

    # ----- prompts --------------------------------------------------------------------------------------------------
    def draw_prompt(self) -> Optional[tuple[int, dict[str, Any]]]:
        """(key, prompt) of the next prompt to generate: requeued ones first, then the dataloader's; None when the
        data has run out."""
        if self._requeued:
            item = self._requeued.pop(0)
        else:
            if not self._local_batch:
                batch = self.next_batch()
                if batch is None:
                    return None
                self._local_batch = list(batch)
            item = self._local_batch.pop(0)
        key, self._next_key = self._next_key, self._next_key + 1
        self.pending[key] = item
        return key, item

    def _draw_more(self) -> Optional[list[dict[str, Any]]]:
        """Another batch of prompts for one_step_off's dynamic sampling, drawn as the first (so it is checkpointed
        while in flight) and counted to the generation that asked; None when the data ran out."""
        keys = _BATCH_KEYS.get()
        if keys is None:
            raise RuntimeError("dynamic sampling drew more prompts outside a one_step_off generation batch")
        drawn = self._draw_batch()
        if drawn is None:
            return None
        keys.extend(key for key, _ in drawn)
        return [item for _, item in drawn]

    def generator_input(self, items: list[dict[str, Any]], round_index: int = 0) -> GeneratorInput:
        """As the sync trainer's, but inside a fully_async group the seeds and uids follow the group's index."""
        group = _GROUP_INDEX.get()
        if group is None:
            return super().generator_input(items, round_index)
        saved = self.global_step
        try:  # the sync trainer derives seeds and the uid prefix from the step: give each group its own
            self.global_step = 1_000_000 + group
            gi = super().generator_input(items, round_index)
        finally:
            self.global_step = saved
        gi.uids = [f"g{group}/{uid.split('/', 1)[1]}" for uid in gi.uids]
        gi.batch_metadata = {**(gi.batch_metadata or {}), "global_step": self.global_step, "group": group}
        return gi

    # ----- weights --------------------------------------------------------------------------------------------------
    async def sync_weights(self) -> dict[str, float]:
        """Pause the engines (new generate calls wait; running ones finish first at the `turn` boundary, or take the
        new weights between two tokens at the `token` boundary), sync, resume: rollouts in progress go on with the
        new weights."""
        await self.client.pause()
        try:
            return await super().sync_weights()
        finally:
            await self.client.resume()

    # ----- loops ----------------------------------------------------------------------------------------------------
    async def run_steps(self, max_steps: int) -> None:
        """The loop of `trainer.mode`."""
        if self.mode == "one_step_off":
            await self._one_step_off(max_steps)
        else:
            await self._fully_async(max_steps)

    def _draw_batch(self) -> Optional[list[tuple[int, dict[str, Any]]]]:
        drawn = []
        while len(drawn) < self.batch_size:
            pair = self.draw_prompt()
            if pair is None:
                break
            drawn.append(pair)
        if len(drawn) < self.batch_size:  # a partial last batch is not trained (as the sync loader drops it)
            return None
        return drawn

    async def _generate_batch(
        self, drawn: list[tuple[int, dict[str, Any]]]
    ) -> tuple[Rollouts, float, float, list[int]]:
        """The batch's rollouts, the seconds generating it took, the clock when it finished, and the keys of every
        prompt it used (dynamic sampling's extra batches included)."""
        keys = [key for key, _ in drawn]
        _BATCH_KEYS.set(keys)  # this task's own context
        start = time.perf_counter()
        rollouts = await self.rollouts.collect([item for _, item in drawn])
        finished = time.perf_counter()
        return rollouts, finished - start, finished, keys

    async def _one_step_off(self, max_steps: int) -> None:
        drawn = self._draw_batch() if self.global_step < max_steps else None
        pending = asyncio.create_task(self._generate_batch(drawn)) if drawn else None
        while pending is not None and self.global_step < max_steps:
            waited = time.perf_counter()
            rollouts, generate_s, generated_at, used = await pending
            idle = time.perf_counter() - waited
            drawn = self._draw_batch() if self.global_step + 1 < max_steps else None
            # the engines wait from the end of one batch until the sync lets the next one start
            throttled = time.perf_counter() - generated_at
            pending = asyncio.create_task(self._generate_batch(drawn)) if drawn else None
            self.global_step += 1
            timer = PhaseTimer()
            with timer("step"):
                metrics, generated = await self.learn(rollouts, timer)
                if pending is not None:
                    with timer("wait_generation"):  # batch k+1 must be generated by the weights before update k
                        await asyncio.wait({pending})
                with timer("weight_sync"):
                    metrics.update(await self.sync_weights())
            self._used(used)
            staleness = [self.weight_version - 1 - t.oldest_version for t in rollouts.output.trajectories]
            metrics.update(staleness_metrics(staleness, 0, throttled, idle))
            metrics["timing/generate"] = generate_s
            await self.after_step(self.step_metrics(metrics, timer, generated), max_steps)
        if pending is not None:
            pending.cancel()

    def _used(self, keys: list[int]) -> None:
        """The step is done with these prompts (and with those fully_async's dynamic sampling left out)."""
        self.used_uids.append([*self._used_now, *(str(self.pending[key].get("uid")) for key in keys)])
        self._used_now = []
        for key in keys:
            self.pending.pop(key, None)

    async def _fully_async(self, max_steps: int) -> None:
        buffer: asyncio.Queue[GroupRollout] = asyncio.Queue()
        capacity = asyncio.Condition()
        counters = {"started": 0, "steps_done": 0, "throttled_s": 0.0}
        producer = asyncio.create_task(self._produce(buffer, capacity, counters))
        try:
            while self.global_step < max_steps:
                waited = time.perf_counter()
                taken = await self._take_batch(buffer, producer, capacity, counters)
                if taken is None:
                    break
                groups, rollouts, dropped, sampling_counts = taken
                idle = time.perf_counter() - waited
                throttled, counters["throttled_s"] = counters["throttled_s"], 0.0
                trained_version = self.weight_version  # the weights this step's update starts from
                self.global_step += 1
                timer = PhaseTimer()
                with timer("step"):
                    metrics, generated = await self.learn(rollouts, timer)
                    with timer("weight_sync"):
                        metrics.update(await self.sync_weights())
                self._used([group.index for group in groups])
                staleness = [trained_version - group.oldest_version for group in groups]
                metrics.update(staleness_metrics(staleness, dropped, throttled, idle))
                metrics.update(sampling_counts)
                async with capacity:
                    counters["steps_done"] += 1
                    capacity.notify_all()  # a step done: more groups may start
                await self.after_step(self.step_metrics(metrics, timer, generated), max_steps)
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)

    async def _take_batch(
        self, buffer: asyncio.Queue, producer: asyncio.Task, capacity: asyncio.Condition, counters: dict
    ) -> Optional[tuple[list[GroupRollout], Rollouts, int, dict[str, float]]]:
        """The step's groups and rollouts: `train_batch_size` finished groups within the staleness bound (a stale one
        goes back to be generated again, and frees its place), after dynamic sampling: `filter` leaves out each group
        without reward variance as it arrives and waits for another; `replace` fills a batch with copies of its
        informative groups, or leaves the whole batch out and takes another. Also the count of stale groups dropped
        and the `dynamic_sampling/*` metrics. None when generation ended without enough groups."""
        sampling = self.cfg.trainer.algorithm.dynamic_sampling
        trained_version = self.weight_version
        groups: list[GroupRollout] = []
        dropped = sampled = rounds = 0
        while True:
            while len(groups) < self.batch_size:
                group = await self._next_group(buffer, producer)
                if group is None:
                    if sampling.type is not None:
                        logger.warning("dynamic sampling: the training data ran out with %d groups kept", len(groups))
                    return None
                gap = trained_version - group.oldest_version
                if gap > self.max_staleness:
                    dropped += 1
                    logger.info(
                        "dropped group %d: %d versions old (max_staleness %d)", group.index, gap, self.max_staleness
                    )
                    await self._release(group, capacity, counters, again=True)
                    continue
                sampled += 1
                trajectories = group.rollouts.output.trajectories
                if sampling.type == "filter":
                    if not informative_groups(trajectories)[0]:  # no reward variance: no signal to train on
                        await self._release(group, capacity, counters, again=False)
                        if sampled >= self.rollouts.max_rounds * self.batch_size:
                            raise self.rollouts.filter_gave_up(len(groups))
                        continue
                    group.rollouts.output.trajectories = [t for t in trajectories if t.is_valid]
                groups.append(group)
            rounds += 1
            merged = merge_rollouts([group.rollouts for group in groups])
            merged.sampled_groups = sampled  # the cost includes the groups dynamic sampling left out
            if sampling.type is None:
                return groups, merged, dropped, {}
            if sampling.type == "filter":
                counts = self.rollouts.sampling_metrics(sampled / self.batch_size, sampled, len(groups), 0)
                return groups, merged, dropped, counts
            replaced = replace_uninformative_groups(
                merged.output.trajectories, sampling.min_replace_ratio, self.rollouts.rng
            )
            if replaced is not None:
                merged.output.trajectories, count = replaced
                counts = self.rollouts.sampling_metrics(rounds, sampled, len(groups) - count, count)
                return groups, merged, dropped, counts
            for group in groups:
                await self._release(group, capacity, counters, again=False)
            groups = []
            if rounds >= self.rollouts.max_rounds:
                raise self.rollouts.replace_gave_up()
            logger.warning(
                "dynamic sampling (replace): at most %.0f%% of the groups have reward variance; taking another batch",
                100 * sampling.min_replace_ratio,
            )

    async def _next_group(self, buffer: asyncio.Queue, producer: asyncio.Task) -> Optional[GroupRollout]:
        """The next finished group; None when generation ended and the buffer is empty. A failed group or producer
        raises here."""
        while True:
            if producer.done() and buffer.empty():
                if not producer.cancelled() and producer.exception() is not None:
                    raise producer.exception()
                return None
            getter = asyncio.create_task(buffer.get())
            done, _ = await asyncio.wait({getter, producer}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                continue
            group = getter.result()
            if isinstance(group, Exception):
                raise RuntimeError(f"fully_async generation of a prompt group failed: {group}") from group
            return group

    async def _release(self, group: GroupRollout, capacity: asyncio.Condition, counters: dict, again: bool) -> None:
        """Let go of a group that will not be trained, freeing its place: its prompt is generated `again` (dropped
        for staleness) or used up (left out by dynamic sampling, as the sync trainer moves past such prompts)."""
        item = self.pending.pop(group.index)
        if again:
            self._requeued.append(item)
        else:
            self._used_now.append(str(item.get("uid")))
        async with capacity:
            counters["started"] -= 1
            capacity.notify_all()

    async def _produce(self, buffer: asyncio.Queue, capacity: asyncio.Condition, counters: dict) -> None:
        """Start groups while the staleness bound allows (`started < (steps done + max_staleness + 1) * batch`);
        each finished group goes into `buffer`. Returns when the data ran out and nothing is running."""
        running: set[asyncio.Task] = set()

        def allowed() -> bool:
            return counters["started"] < (counters["steps_done"] + self.max_staleness + 1) * self.batch_size

        try:
            while True:
                async with capacity:
                    waited = time.perf_counter()
                    await capacity.wait_for(allowed)
                    counters["throttled_s"] += time.perf_counter() - waited
                pair = self.draw_prompt()
                if pair is None:
                    if not running:
                        return
                    await asyncio.sleep(0.05)  # a dropped group may come back to be generated again
                    continue
                counters["started"] += 1
                task = asyncio.create_task(self._run_group(*pair, buffer))
                running.add(task)
                task.add_done_callback(running.discard)
        finally:  # groups still generating end here, their envs closed, before the run tears down the env pool
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _run_group(self, key: int, item: dict[str, Any], buffer: asyncio.Queue) -> None:
        """Generate one group into `buffer` (a failure goes there too, so the trainer raises it)."""
        _GROUP_INDEX.set(key)
        try:
            rollouts = await self.rollouts.collect_once([item])  # dynamic sampling is applied when it is taken
        except Exception as exc:  # noqa: BLE001 - handed to the trainer, which raises it
            await buffer.put(exc)
            return
        await buffer.put(GroupRollout(rollouts, key))
