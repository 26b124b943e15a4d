"""`RayPPOTrainer`: the synchronous RL loop. One step reads top to bottom:

    rollouts -> old/ref logprobs and values -> KL in reward -> advantages -> critic and policy updates -> sync -> log

Each arrow is one call into one room: the rollout collector (generation through the engines, reward shaping and
dynamic sampling), the worker groups (FSDP2 ranks on Ray), the algorithm library (KL, advantages), and the
weight-sync strategy (engines serve the new weights).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import torch

from skyrl_train.algorithms import compute_advantages, kl_estimate, kl_in_reward, make_kl_controller
from skyrl_train.algorithms.masked import masked_mean, masked_whiten
from skyrl_train.evaluation import evaluate
from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.from_config import sampling_params_from_config
from skyrl_train.generators.metrics import rewards_by_uid, solved_share
from skyrl_train.generators.types import GeneratorInput, GeneratorOutput
from skyrl_train.health import HealthMonitor
from skyrl_train.inference.client import InferenceEngineClient
from skyrl_train.rollouts import RolloutCollector, Rollouts
from skyrl_train.serving.gate import WeightGate
from skyrl_train.trainer_checkpoints import TrainerCheckpoints
from skyrl_train.training_batch import TrainingBatch
from skyrl_train.utils.checkpoint_io import local_directory_for_writing
from skyrl_train.utils.timer import PhaseTimer
from skyrl_train.utils.tracking import Tracker
from skyrl_train.weight_sync.strategy import WeightSyncStrategy
from skyrl_train.workers.accounting import reduction_denominator
from skyrl_train.workers.group import WorkerGroup
from skyrl_train.workers.shard_send import PresumedWrite, update_send
from skyrl_train.workers.worker import MiniBatchResult

if TYPE_CHECKING:
    from skyrl_train.rewards.scorer import RewardScorer

logger = logging.getLogger(__name__)

DRIVER_TORCH_THREADS = 1
"""Torch threads of the driver while it trains. Its tensor work is small (row selection, advantages, metrics), and
on a busy machine a multi-threaded op waits for a second OpenMP thread to get a core: indexing 128 of 256 rows took
~7 ms with 2 threads on the 2-core machine during a run, 4 us with 1, a few times per step."""

LOOP_GC_GEN0_THRESHOLD = 20_000
"""The garbage collector's generation-0 threshold while the loop runs (Python's default is 700). A quickstart step
makes and frees tens of thousands of small objects (envs, trajectories, lists of token ids), nearly all freed by
reference counting; with the default the driver ran ~45 generation-0 and ~4 generation-1 collections a step, ~1.9 ms
of the 2-core machine's step, and with 20 000 almost none. Cyclic garbage is still collected, in bigger batches."""


@dataclass
class TrainResult:
    """What a finished run reports: steps taken, eval metrics before and after, and the metric history."""

    global_step: int
    initial_eval: dict[str, float]
    final_eval: dict[str, float]
    history: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


class RayPPOTrainer:
    """Runs PPO-family training over Ray worker groups and inference engines (built by `BasePPOExp`)."""

    def __init__(
        self,
        cfg: Any,
        tokenizer: Any,
        train_loader: Any,
        eval_items: list[dict[str, Any]],
        policy: WorkerGroup,
        ref: Optional[WorkerGroup],
        critic: Optional[WorkerGroup],
        client: InferenceEngineClient,
        generator: GeneratorInterface,
        weight_sync: WeightSyncStrategy,
        tracker: Tracker,
        verify_weight_sync: bool = False,
        reward_scorer: Optional[RewardScorer] = None,
    ) -> None:
        self.cfg, self.tokenizer = cfg, tokenizer
        self.train_loader, self.eval_items = train_loader, eval_items
        self.policy, self.ref, self.critic = policy, ref, critic
        self.client, self.generator, self.weight_sync, self.tracker = client, generator, weight_sync, tracker
        self.verify_weight_sync = verify_weight_sync
        self.reward_scorer = reward_scorer  # None: the env's rewards are used as the generator placed them
        self.algorithm = cfg.trainer.algorithm
        self.engines_sleep = engines_sleep_while_training(cfg)
        self.endpoint_gate = WeightGate()  # the run's OpenAI endpoint (if any) holds it open per request
        self.n_samples = cfg.generator.n_samples_per_prompt
        self.kl_controller = None
        if self.algorithm.use_kl_in_reward:
            ctrl = self.algorithm.kl_ctrl
            self.kl_controller = make_kl_controller(ctrl.type, ctrl.kl_coef, ctrl.kl_target, ctrl.horizon)
        self.checkpoints = TrainerCheckpoints(cfg, policy, critic, train_loader)
        score = None if reward_scorer is None else reward_scorer.score
        self.rollouts = RolloutCollector(cfg, generator, self.generator_input, self.next_batch, score=score)
        self.health = HealthMonitor.from_config(cfg)
        self.global_step = 0
        self.weight_version = 0
        self.initial_eval: dict[str, float] = {}
        self.sampled_groups_total = 0

    # ----- the loop -------------------------------------------------------------------------------------------------
    async def train(self) -> TrainResult:
        """Resume if configured, evaluate, then run steps until the data or `max_training_steps` runs out.

        The driver runs with `DRIVER_TORCH_THREADS` torch threads and the garbage collector's generation-0 threshold at
        `LOOP_GC_GEN0_THRESHOLD` meanwhile (both restored after).
        """
        threads, gc_thresholds = torch.get_num_threads(), gc.get_threshold()
        torch.set_num_threads(DRIVER_TORCH_THREADS)
        try:
            await self.start()
            try:
                await self.run_steps(self.total_steps())
                return await self.finish()
            finally:
                gc.unfreeze()  # what start() froze is collectable again once the loop is over
        finally:
            torch.set_num_threads(threads)
            gc.set_threshold(*gc_thresholds)

    async def start(self) -> None:
        """Restore a checkpoint (when configured), serve the policy's weights, and evaluate before training."""
        self.global_step = self.checkpoints.resume()
        self.restore_state(self.checkpoints.resumed_extra)
        self.weight_version = self.global_step  # the sync below serves version step + 1, as in an unbroken run
        await self.sync_weights()  # engines serve exactly the policy's (possibly resumed) weights
        if self.cfg.trainer.eval_before_train and self.global_step == 0:
            self.initial_eval = await self.evaluate()
            self.tracker.log(self.initial_eval, step=0)
        # The ~500k objects of set-up (libraries, Ray, configs) move to the permanent generation: the full garbage
        # collections that the steps' allocations trigger then scan only what the loop made, instead of pausing the
        # driver for ~0.24 s every ~40 quickstart steps.
        gc.collect()
        gc.freeze()
        gc.set_threshold(LOOP_GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])

    async def run_steps(self, max_steps: int) -> None:
        """The synchronous loop: each step generates its batch, then trains on it (the async trainers override it)."""
        while self.global_step < max_steps:
            batch = self.next_batch()
            if batch is None:
                break
            self.global_step += 1
            metrics = await self.step(batch)
            await self.after_step(metrics, max_steps)

    async def after_step(self, metrics: dict[str, float], max_steps: int) -> None:
        """Evaluate at `eval_interval`, log, check health, and checkpoint at `ckpt_interval`."""
        interval = self.cfg.trainer.eval_interval
        if interval > 0 and self.global_step % interval == 0 and self.global_step < max_steps:
            metrics.update(await self.evaluate())
        self.tracker.log(metrics, step=self.global_step)
        self.health.raise_if_stopping()  # after logging, so the alerting step reaches the tracker
        self.checkpoints.after_step(self.global_step, self.state(), last=self.global_step >= max_steps)

    async def finish(self) -> TrainResult:
        """The final evaluation and checkpoint; the run's result."""
        final_eval = self.initial_eval
        if self.eval_items:
            final_eval = await self.evaluate()
            self.tracker.log(final_eval, step=self.global_step)
        self.checkpoints.at_end(self.global_step, self.state())
        return TrainResult(self.global_step, self.initial_eval, final_eval, dict(self.tracker.history))

    def state(self) -> dict[str, Any]:
        """Driver-side state a checkpoint keeps beyond the step and dataloader position: the KL-in-reward
        coefficient (the adaptive controller moves it), the eval before training (so a resumed run still reports
        it) and the count of sampled prompt groups."""
        return {
            "kl_coef": None if self.kl_controller is None else self.kl_controller.value,
            "initial_eval": dict(self.initial_eval),
            "sampled_groups_total": self.sampled_groups_total,
        }

    def restore_state(self, state: Optional[dict[str, Any]]) -> None:
        """Apply what `state()` saved (nothing when starting fresh)."""
        if not state:
            return
        if self.kl_controller is not None and state.get("kl_coef") is not None:
            self.kl_controller.value = float(state["kl_coef"])
        self.initial_eval = dict(state.get("initial_eval") or {})
        self.sampled_groups_total = int(state.get("sampled_groups_total") or 0)

    def total_steps(self) -> int:
        """Steps in the run: `max_training_steps` if set, else epochs x batches per epoch."""
        return total_training_steps(self.cfg, self.train_loader)

    def next_batch(self) -> Optional[list[dict[str, Any]]]:
        """The next batch of prompts, moving to the next epoch when one ends; None after the last epoch."""
        return self.train_loader.next_batch(max_epochs=self.cfg.trainer.epochs)

    async def step(self, items: list[dict[str, Any]]) -> dict[str, float]:
        """One training step on a batch of prompts; returns its metrics."""
        timer = PhaseTimer()
        with timer("step"):
            with timer("generate"):
                rollouts = await self.rollouts.collect(items)
            metrics, generated = await self.learn(rollouts, timer, sync_in_update=self.syncs_in_update)
            if not self.syncs_in_update:
                with timer("weight_sync"):
                    metrics.update(await self.sync_weights())
        return self.step_metrics(metrics, timer, generated)

    @property
    def syncs_in_update(self) -> bool:
        """Whether a step's weight sync runs inside the policy update's own call (`train_mini_batches` with
        `sync_weights_version`), saving the round trip to every rank that a separate sync call costs; reported as
        `weight_sync/in_update`. Only when the engines stay awake while the policy trains (sleeping engines must wake
        before they take weights) and no OpenAI endpoint serves the run (its requests wait during a sync, so they
        would wait for the whole update)."""
        return not self.engines_sleep and not self.cfg.generator.http_endpoint.enabled

    @property
    def defers_weight_install(self) -> bool:
        """Whether a sync inside the update leaves the engines' installation of its final chunk to their next
        generate call (`WeightSyncStrategy.defer_install`), which saves the engines' notify/acknowledge round trip
        after the update; reported as `weight_sync/installed_at_generate`. Only when the sync runs in the update, no
        checksum verification follows it (that reads the installed weights at once), and every engine is a proxy that
        can carry the chunk. Senders that gather ignore it (their engines install before the send returns)."""
        return self.syncs_in_update and not self.verify_weight_sync and self.weight_sync.can_defer_install()

    async def learn(
        self, rollouts: Rollouts, timer: PhaseTimer, sync_in_update: bool = False
    ) -> tuple[dict[str, float], float]:
        """Everything of a step between its rollouts and the weight sync: rewards, log-probs, KL, advantages, critic
        and policy updates; with `sync_in_update`, also the weight sync, in the policy update's call. Returns the
        metrics and the count of generated tokens."""
        if self.engines_sleep:
            await self.sleep_engines()
        with timer("reward"):
            output = rollouts.output
            batch = TrainingBatch.from_trajectories(output.trajectories, self.tokenizer.pad_token_id)
            metrics = reward_metrics(output, self.n_samples)
            self.sampled_groups_total += rollouts.sampled_groups
            metrics["trainer/sampled_groups_total"] = float(self.sampled_groups_total)
        on_policy = self.takes_one_policy_update(batch)
        metrics["policy/old_logprobs_from_update"] = self.old_logprobs_from_update(batch, on_policy)
        with timer("fwd_logprobs"):  # the policy's old log-probs only when they are needed before its update
            old_logprobs, ref_logprobs, values = await self.forward_passes(
                batch, with_policy=self.old_logprobs_before_update
            )
        if self.kl_controller is not None:
            metrics.update(self.apply_kl_in_reward(batch, old_logprobs, ref_logprobs))
        with timer("advantages"):
            advantages, returns = self.advantages(batch, values)
        if self.critic is not None:
            with timer("train_critic"):
                metrics.update(await self.train_critic(batch, returns, values))
        with timer("train_policy"):
            policy_metrics, old_logprobs = await self.train_policy(
                batch, advantages, old_logprobs, ref_logprobs, on_policy, sync_in_update
            )
            metrics.update(policy_metrics)
        metrics.update(logprob_metrics(batch, old_logprobs, ref_logprobs))
        if self.engines_sleep:
            await self.wake_engines()
        return metrics, float(batch.response_mask.sum())

    def step_metrics(self, metrics: dict[str, float], timer: PhaseTimer, generated: float) -> dict[str, float]:
        """Add the phase timings, throughput, step number and health observations to a step's metrics."""
        metrics.update(timer.metrics())
        metrics["trainer/tokens_per_second"] = generated / max(timer.seconds["step"], 1e-9)
        metrics["trainer/global_step"] = float(self.global_step)
        metrics.update(self.health.observe(self.global_step, metrics))
        return metrics

    # ----- phases -------------------------------------------------------------------------------------------------
    def generator_input(self, items: list[dict[str, Any]], round_index: int = 0) -> GeneratorInput:
        """Repeat each prompt `n_samples_per_prompt` times; samples of one prompt share a uid. `round_index` counts
        the extra generation batches dynamic sampling draws within one step (their seeds and uids differ)."""
        repeated = [item for item in items for _ in range(self.n_samples)]
        base_seed = self.cfg.generator.sampling_params.seed
        seeds = None
        if base_seed is not None:  # reproducible rollouts: a seed per (step, round, row), independent of batching
            offset = base_seed * 1_000_003 + self.global_step * 100_003 + round_index * 7_919_009
            seeds = [(offset + row * 101) % 2**31 for row in range(len(repeated))]
        prefix = f"{self.global_step}/" if round_index == 0 else f"{self.global_step}.{round_index}/"
        return GeneratorInput(
            seeds=seeds,
            prompts=[item["prompt"] for item in repeated],
            env_classes=[item["env_class"] for item in repeated],
            env_extras=[dict(item["env_extras"]) for item in repeated],
            uids=[f"{prefix}{item['uid']}" for item in repeated],
            batch_metadata={"global_step": self.global_step, "training_phase": "train", "round": round_index},
        )

    @property
    def old_logprobs_before_update(self) -> bool:
        """Whether the policy's old log-probs are computed before the advantages, by their own forward call: only
        KL in the reward needs them that early. Otherwise the update's call computes them itself (see `train_policy`),
        so the batch travels to the policy ranks once."""
        return self.kl_controller is not None

    def takes_one_policy_update(self, batch: TrainingBatch) -> bool:
        """True when the policy takes exactly one optimizer step on this batch and nothing before it needs the old
        log-probs (no KL-in-reward): the old policy is then the current one, so its log-probs come from the update's
        own forward (`forward_backward(on_policy=True)`) instead of a forward pass of their own. Reported as the
        metric `policy/old_logprobs_from_update` (1 = skipped).

        This holds in the async modes too: there the "old" log-probs are the proximal policy's (the weights at
        training time, which the update's forward uses), while the policy that sampled the data, possibly versions
        older, is known from the rollout log-probs that off-policy correction compares against."""
        one_pass = self.cfg.trainer.update_epochs_per_batch == 1
        one_mini_batch = len(self.mini_batches(batch, self.cfg.trainer.policy_mini_batch_size)) == 1
        return one_pass and one_mini_batch and self.kl_controller is None

    def old_logprobs_from_update(self, batch: TrainingBatch, on_policy: bool) -> float:
        """The share of the batch whose old log-probs come from the update's own forward passes rather than from a
        forward pass of their own: all of it when `on_policy`; none when KL in the reward needs them before the
        update; otherwise the first of its mini-batches (see `PolicyWorker.train_mini_batches`)."""
        if on_policy:
            return 1.0
        if self.old_logprobs_before_update:
            return 0.0
        return 1.0 / len(self.mini_batches(batch, self.cfg.trainer.policy_mini_batch_size))

    async def forward_passes(self, batch: TrainingBatch, with_policy: bool = True):
        """Old policy logprobs (None unless `with_policy`), reference logprobs (when KL is used) and critic values
        (when there is a critic)."""
        calls = [self.policy.run_sharded_async("forward", batch)] if with_policy else []
        ref_from_policy = self.ref is None and self.cfg.ref_is_policy_base
        if self.ref is not None:
            calls.append(self.ref.run_sharded_async("forward", batch))
        elif ref_from_policy:  # LoRA: the reference is the policy's base model with its adapters switched off
            calls.append(self.policy.run_sharded_async("forward_base", batch))
        if self.critic is not None:
            calls.append(self.critic.run_sharded_async("forward", batch))
        results = list(await asyncio.gather(*calls))
        old = results.pop(0) if with_policy else None
        ref = results.pop(0) if self.ref is not None or ref_from_policy else None
        values = results.pop(0) if self.critic is not None else None
        return old, ref, values

    def apply_kl_in_reward(self, batch, old_logprobs, ref_logprobs) -> dict[str, float]:
        """Subtract `beta * KL(policy || ref)` per generated token from the rewards (`algorithms.kl.kl_in_reward`),
        then feed the controller the KL it documents: the mean over sequences of each sequence's summed KL."""
        mask = batch.valid_response_mask
        beta = self.kl_controller.value
        estimator = self.algorithm.kl_estimator_type
        batch.token_rewards, kl = kl_in_reward(batch.token_rewards, old_logprobs, ref_logprobs, mask, beta, estimator)
        self.kl_controller.update(float(kl["kl"]), n_steps=int(batch.valid.sum()))
        return {
            "reward/kl_penalty_coef": beta,
            "reward/kl_sequence_sum": float(kl["kl"]),
            "reward/kl_token_mean": float(kl["kl_token_mean"]),
        }

    def advantages(self, batch: TrainingBatch, values: Optional[torch.Tensor]):
        """Advantages and returns from the configured estimator (`trainer.algorithm.advantage_estimator`), over the
        tokens the policy generated (`response_mask`) of the valid rows; rows whose env failed get 0. With
        `advantage_batch_normalize` the advantages are then z-scored over the batch's trained tokens."""
        rows = batch.valid.nonzero().squeeze(-1)
        advantages = torch.zeros_like(batch.token_rewards)
        returns = torch.zeros_like(batch.token_rewards)
        if len(rows) == 0:
            return advantages, returns
        subset_advantages, subset_returns = compute_advantages(
            self.algorithm.advantage_estimator,
            token_level_rewards=batch.token_rewards[rows],
            response_mask=batch.response_mask[rows],
            index=[batch.uids[i] for i in rows.tolist()],
            values=None if values is None else values[rows],
            gamma=self.algorithm.gamma,
            lambd=self.algorithm.lambd,
            norm_by_std=self.algorithm.grpo_norm_by_std,
            epsilon=self.algorithm.grpo_std_epsilon,
        )
        advantages[rows], returns[rows] = subset_advantages.float(), subset_returns.float()
        if self.algorithm.advantage_batch_normalize and batch.loss_mask.sum() > 1:
            advantages = masked_whiten(advantages, batch.loss_mask)
        return advantages, returns

    def mini_batches(self, batch: TrainingBatch, prompts_per_mini_batch: int) -> list[list[int]]:
        """Row indices of each mini-batch: `prompts_per_mini_batch x n_samples` consecutive rows."""
        size = max(1, prompts_per_mini_batch * self.n_samples)
        return [list(range(start, min(start + size, len(batch)))) for start in range(0, len(batch), size)]

    def loss_denominator(self, loss_mask: torch.Tensor) -> float:
        """What `trainer.algorithm.loss_reduction` divides by over one whole mini-batch (before it is split over the
        data-parallel ranks), so every rank normalises by the same number."""
        return reduction_denominator(self.algorithm.loss_reduction, loss_mask, self.algorithm.max_seq_len)

    async def train_policy(
        self, batch, advantages, old_logprobs, ref_logprobs, on_policy: bool, sync_in_update: bool = False
    ) -> tuple[dict[str, float], Optional[torch.Tensor]]:
        """`update_epochs_per_batch` passes over the policy mini-batches: forward_backward, then an optimizer step.
        The old log-probs are the ones given, else the update's own forward (`on_policy`, see
        `takes_one_policy_update`), else a forward the update's call runs before its first optimizer step. With
        `sync_in_update` the same call then sends the new weights to the engines as the next version (the sync's
        metrics join the returned ones). Returns the metrics and the old log-probs (None when `on_policy`)."""
        mini_batch_size = self.cfg.trainer.policy_mini_batch_size
        per_row = {"advantages": advantages, "old_logprobs": old_logprobs, "ref_logprobs": ref_logprobs}
        forward_first = old_logprobs is None and not on_policy
        options: dict[str, Any] = {"old_logprobs_first": True} if forward_first else {"on_policy": on_policy}
        if sync_in_update:
            await self.weight_sync.install_deferred()  # the last sync's payload is about to be overwritten
            self.weight_version += 1
            options["sync_weights_version"] = self.weight_version
            options["defer_weight_install"] = self.defers_weight_install
        metrics, results = await self.train_role(self.policy, "policy", batch, mini_batch_size, per_row, **options)
        if sync_in_update:
            sent = update_send(results[-1].weight_sync or [])
            if sent is None:  # the ranks presumed a write plan rank 0 no longer proposes: nothing was sent
                report = (await asyncio.to_thread(self.policy.run_all, "sync_weights", self.weight_version))[0]
            else:
                report = sent.report()
            metrics.update(await self.finish_sync(report))
            presumed = sent is not None and isinstance(results[-1].weight_sync[0], PresumedWrite)
            metrics["weight_sync/presumed_plan"] = float(presumed)
            metrics["weight_sync/in_update"] = 1.0
        if forward_first:
            old_logprobs = torch.zeros_like(batch.response_mask, dtype=torch.float32)
            for rows, result in zip(self.mini_batches(batch, mini_batch_size), results):
                old_logprobs[torch.tensor(rows)] = result.old_logprobs
        if on_policy and "policy/logprob_diff_vs_rollout" in metrics:
            # the update's forward is the trainer's only look at this batch: report its engine difference
            metrics["policy/rollout_train_logprob_abs_diff_mean"] = metrics["policy/logprob_diff_vs_rollout"]
        return metrics, old_logprobs

    async def train_critic(self, batch, returns, values) -> dict[str, float]:
        """Critic mini-batch updates on the returns, clipped around the values it predicted before the update."""
        mini_batch_size = self.cfg.trainer.critic_mini_batch_size
        per_row = {"returns": returns, "old_values": values}
        metrics, _ = await self.train_role(self.critic, "critic", batch, mini_batch_size, per_row)
        return metrics

    async def train_role(
        self, group, role: str, batch, mini_batch_size: int, per_row: dict, **options: Any
    ) -> tuple[dict[str, float], list[MiniBatchResult]]:
        """`update_epochs_per_batch` passes over `role`'s mini-batches: `forward_backward` on each (with those rows of
        every `per_row` tensor, None stays None), then an optimizer step, all in one `train_mini_batches` call per
        rank (with the `options`). Returns the metrics averaged over the steps, plus `<role>/grad_norm`, and each
        mini-batch's joined `MiniBatchResult`."""
        mini_batches = []
        for rows in self.mini_batches(batch, mini_batch_size):
            if len(rows) == len(batch):  # one mini-batch: the whole batch as it is (sharding copies the rows anyway)
                batch_kwargs, mini_batch = dict(per_row), batch
            else:
                index = torch.tensor(rows)
                batch_kwargs = {name: None if values is None else values[index] for name, values in per_row.items()}
                mini_batch = batch.select(rows)
            batch_kwargs["loss_denominator"] = self.loss_denominator(mini_batch.loss_mask)
            mini_batches.append((mini_batch, batch_kwargs))
        epochs = self.cfg.trainer.update_epochs_per_batch
        results = await group.run_sharded_each_async("train_mini_batches", mini_batches, epochs=epochs, **options)
        return average_metrics([step for result in results for step in result.steps]), results

    async def wake_engines(self) -> None:
        """Hand the GPUs back to the colocated engines: every worker group first returns the memory its caching
        allocator holds for freed tensors (`BaseWorker.release_memory`: the policy's offloaded optimizer state,
        gradients and activations, the ref's activations), then the engines wake into it. Without that step they
        would wake next to everything the workers ever reserved."""
        groups = [group for group in self.colocated_groups() if group is not None]
        await asyncio.gather(*(asyncio.to_thread(group.run_all, "release_memory") for group in groups))
        await self.client.wake_up()

    def colocated_groups(self) -> list[Optional[WorkerGroup]]:
        """The worker groups sharing the engines' GPUs: policy, ref, critic and the reward model's."""
        reward = getattr(self.reward_scorer, "reward_group", None)
        return [self.policy, self.ref, self.critic, reward]

    async def sleep_engines(self) -> None:
        """Close the endpoint gate (requests to `generator.http_endpoint` wait until the next sync), then put the
        engines to sleep."""
        await self.endpoint_gate.close()
        await self.client.sleep()

    async def sync_weights(self) -> dict[str, float]:
        """Send the policy's weights to every engine as the next version; optionally verify them by checksum.
        Requests to the run's OpenAI endpoint wait while it runs, so none sees half-updated weights."""
        if not self.endpoint_gate.is_closed:
            await self.endpoint_gate.close()
        try:
            return await self._sync_weights()
        finally:
            self.endpoint_gate.open()

    async def _sync_weights(self) -> dict[str, float]:
        await self.weight_sync.install_deferred()
        self.weight_version += 1
        reports = await asyncio.to_thread(self.policy.run_all, "sync_weights", self.weight_version)
        return await self.finish_sync(reports[0])

    async def finish_sync(self, report: dict[str, Any]) -> dict[str, float]:
        """After rank 0 sent the weights (its `sync_weights` report): confirm every engine serves the version, verify
        checksums when `verify_weight_sync` is on, and return the `weight_sync/*` metrics. A deferred final chunk
        (`report["deferred"]`) goes to the engines' proxies instead, which confirm the version at the next generate."""
        deferred = report.get("deferred")
        if deferred is not None:
            self.weight_sync.defer_install(report["version"], deferred)
        else:
            await self.weight_sync.confirm(report["version"], report.get("served_versions"))  # no round trip if given
        metrics = {
            "weight_sync/installed_at_generate": float(deferred is not None),
            "weight_sync/version": float(report["version"]),
            "weight_sync/megabytes": report["num_bytes"] / 1e6,
            "weight_sync/seconds": report["seconds"],
            "weight_sync/writer_ranks": float(report.get("writers", 1)),
        }
        if self.verify_weight_sync:
            verdict = await self.weight_sync.verify(report["checksums"])
            metrics["weight_sync/verified_tensors"] = float(verdict.num_checked)
        return metrics

    async def evaluate(self) -> dict[str, float]:
        """pass@n on the eval prompts (greedy by default), per data source; rollouts dumped as jsonl."""
        if not self.eval_items:
            return {}
        dumps = os.path.join(os.path.expanduser(self.cfg.trainer.export_path), "dumped_evals")
        with local_directory_for_writing(dumps) as local:  # an fsspec URL is written locally, then uploaded
            return await evaluate(
                self.generator,
                self.eval_items,
                sampling_params_from_config(self.cfg.generator.eval_sampling_params),
                n_samples=self.cfg.generator.eval_n_samples_per_prompt,
                dump_path=Path(local) / f"global_step_{self.global_step}.jsonl",
                tokenizer=self.tokenizer,
                batch_size=self.cfg.trainer.eval_batch_size,
                score=None if self.reward_scorer is None else self.reward_scorer.score,
            )


def engines_sleep_while_training(cfg: Any) -> bool:
    """Whether the step puts the engines to sleep while the workers train: colocated runs on GPUs only.

    Sleeping hands the engines' GPU memory to the workers. On CPU it frees nothing (hf keeps its weights, vLLM has no
    sleep mode there and resets its prefix cache on every weight update), so the two RPC rounds are skipped.
    """
    return cfg.trainer.placement.colocate_all and cfg.resolved_device() == "cuda"


def total_training_steps(cfg: Any, train_loader: Any) -> int:
    """Steps the loop will run: `trainer.epochs` x batches per epoch, capped by `trainer.max_training_steps` if set.

    The cap never extends a run: the loop ends when the epochs run out, so the progress bar and the learning-rate
    schedule must not count steps beyond that.
    """
    all_epochs = cfg.trainer.epochs * len(train_loader)
    cap = cfg.trainer.max_training_steps
    return min(cap, all_epochs) if cap is not None else all_epochs


def optimizer_steps_per_training_step(cfg: Any, role: str) -> int:
    """Optimizer steps one training step takes for `role` (`policy` or `critic`): `update_epochs_per_batch` passes
    over `ceil(train_batch_size / <role>_mini_batch_size)` mini-batches. Decaying LR schedules count these.

    (Step-wise multi-turn trajectories can make a batch longer than `train_batch_size x n_samples_per_prompt` rows;
    the schedule then reaches its end value a little early and stays there.)
    """
    mini_batch_size = {"policy": cfg.trainer.policy_mini_batch_size, "critic": cfg.trainer.critic_mini_batch_size}[role]
    mini_batches = -(-cfg.trainer.train_batch_size // max(1, mini_batch_size))
    return cfg.trainer.update_epochs_per_batch * mini_batches


# ----- metric helpers ---------------------------------------------------------------------------------------------
def reward_metrics(output: GeneratorOutput, n_samples: int) -> dict[str, float]:
    """`reward/*` (mean, sample std, pass@n, share of groups with mixed rewards) plus the generator's own metrics.
    Plain Python over one grouping pass: on the step's critical path, torch's small-tensor ops cost twice as much."""
    rewards = output.rewards
    groups = rewards_by_uid(output.trajectories, rewards)
    mean = sum(rewards) / max(len(rewards), 1)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)) if len(rewards) > 1 else 0.0
    metrics = {
        "reward/mean": mean,
        "reward/std": std,
        f"reward/pass_at_{n_samples}": solved_share(groups),
        "reward/groups_with_signal": sum(len(set(values)) > 1 for values in groups.values()) / max(len(groups), 1),
    }
    metrics.update(output.metrics)
    return metrics


def logprob_metrics(batch: TrainingBatch, old: Optional[torch.Tensor], ref: Optional[torch.Tensor]) -> dict[str, float]:
    """Train-vs-rollout logprob difference (engine and trainer should agree for equal weights) and KL to ref; none
    without the old log-probs (then the policy update reports the difference, see `takes_one_policy_update`)."""
    metrics: dict[str, float] = {}
    if old is None:
        return metrics
    mask = batch.valid_response_mask
    if batch.rollout_logprobs is not None and mask.sum() > 0:
        diff = (old - batch.rollout_logprobs).abs()
        metrics["policy/rollout_train_logprob_abs_diff_mean"] = float(masked_mean(diff, mask))
        metrics["policy/rollout_train_logprob_abs_diff_max"] = float(diff[mask.bool()].max())
    if ref is not None and mask.sum() > 0:
        metrics["policy/kl_to_ref_k3"] = float(masked_mean(kl_estimate(old, ref, "k3"), mask))
    return metrics


def average_metrics(collected: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each metric over mini-batches."""
    keys = {key for metrics in collected for key in metrics}
    return {key: sum(m[key] for m in collected if key in m) / sum(key in m for m in collected) for key in keys}
