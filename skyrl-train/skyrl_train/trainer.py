"""`RayPPOTrainer`: the RL loop, every `trainer.mode`. One step reads top to bottom:

    rollouts -> old/ref log-probs and values -> KL in reward (or distillation) -> advantages -> updates -> publish

Each arrow is one call into one room: the mode's rollout source (`rollouts.sources`: generation, reward shaping,
dynamic sampling), the role clients (`workers.roles`: FSDP2 ranks on Ray), the algorithm library (KL, advantages)
and the weight publisher (engines serve the new weights). Which calls fuse (the weights sent inside the policy
update, old log-probs from the update's own forward) is decided once per run by the `RunPlan`.
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

from skyrl_train.algorithms import (
    compute_advantages,
    distillation_rewards,
    kl_estimate,
    kl_in_reward,
    make_kl_controller,
)
from skyrl_train.algorithms.masked import masked_mean, masked_whiten
from skyrl_train.config.run_plan import RunPlan
from skyrl_train.evaluation import evaluate
from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.from_config import sampling_params_from_config
from skyrl_train.generators.metrics import rewards_by_uid, solved_share
from skyrl_train.generators.types import GeneratorOutput
from skyrl_train.health import HealthMonitor
from skyrl_train.inference.client import InferenceEngineClient, prefix_cache_metrics
from skyrl_train.rollouts import (
    DynamicSampling,
    FullyAsyncSource,
    OneStepOffSource,
    PromptSource,
    RolloutCollector,
    Rollouts,
    RolloutSource,
    SyncSource,
)
from skyrl_train.trainer_checkpoints import TrainerCheckpoints
from skyrl_train.training_batch import TrainingBatch
from skyrl_train.utils.batch_dump import BatchDump
from skyrl_train.utils.checkpoint_io import local_directory_for_writing
from skyrl_train.utils.memory import MemoryMonitor
from skyrl_train.utils.timeline import RunTimeline, timeline_sources
from skyrl_train.utils.timer import PhaseTimer
from skyrl_train.utils.tracking import Tracker
from skyrl_train.weight_publisher import WeightPublisher
from skyrl_train.weight_sync.strategy import WeightSyncStrategy
from skyrl_train.workers.distributed import node_ip
from skyrl_train.workers.group import WorkerGroup
from skyrl_train.workers.roles import CriticClient, PolicyClient, PolicyUpdate, ReferenceClient

if TYPE_CHECKING:
    from skyrl_train.rewards.scorer import RewardScorer

logger = logging.getLogger(__name__)

DRIVER_TORCH_THREADS = 1
"""Torch threads of the driver while it trains: its tensor work is small (row selection, advantages, metrics), and on
a busy machine a multi-threaded op waits for a second OpenMP thread to get a core (docs/performance.md)."""

LOOP_GC_GEN0_THRESHOLD = 20_000
"""The garbage collector's generation-0 threshold while the loop runs (Python's default is 700): a step makes and
frees tens of thousands of small objects, nearly all freed by reference counting, so frequent generation-0
collections cost time and find little (docs/performance.md). Cyclic garbage is still collected, in bigger batches."""


@dataclass
class TrainResult:
    """What a finished run reports: steps taken, eval metrics before and after, and the metric history."""

    global_step: int
    initial_eval: dict[str, float]
    final_eval: dict[str, float]
    history: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


class RayPPOTrainer:
    """Runs PPO-family training over Ray worker groups and inference engines (built by `BasePPOExp`), in the loop of
    `trainer.mode`: `sync`, `one_step_off` or `fully_async` (`rollouts.sources`)."""

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
        self.client, self.generator, self.tracker = client, generator, tracker
        self.reward_scorer = reward_scorer  # None: the env's rewards are used as the generator placed them
        self.algorithm = cfg.trainer.algorithm
        can_defer = weight_sync is not None and weight_sync.can_defer_install()
        self.plan = RunPlan.from_config(cfg, verify_weight_sync, can_defer_install=can_defer)
        self.policy = PolicyClient(policy, cfg)
        self.ref = ReferenceClient(ref) if ref is not None else None
        self.critic = CriticClient(critic, cfg) if critic is not None else None
        colocated = [policy, ref, critic, getattr(reward_scorer, "reward_group", None)]  # share the engines' GPUs
        self.weights = WeightPublisher(
            self.policy, weight_sync, client, self.plan, verify_weight_sync, colocated_groups=colocated
        )
        self.n_samples = cfg.generator.n_samples_per_prompt
        self.kl_controller = None
        if self.algorithm.use_kl_in_reward:
            ctrl = self.algorithm.kl_ctrl
            self.kl_controller = make_kl_controller(ctrl.type, ctrl.kl_coef, ctrl.kl_target, ctrl.horizon)
        self.checkpoints = TrainerCheckpoints(cfg, policy, critic, train_loader)
        self.batch_dump = BatchDump.from_config(cfg)  # trainer.dump_data_batch
        self.prompts = PromptSource(train_loader, cfg.trainer.epochs, cfg.trainer.train_batch_size)
        self.source = self.make_rollout_source()
        self.health = HealthMonitor.from_config(cfg)
        self.timeline = self.make_timeline(policy, critic, ref) if cfg.trainer.record_timeline else None
        self.global_step = 0
        self.initial_eval: dict[str, float] = {}
        self.sampled_groups_total = 0
        self.memory: Optional[MemoryMonitor] = None
        """The run's processes' resident memory, read after each step (`memory/*`); built by `start`."""

    def make_rollout_source(self) -> RolloutSource:
        """The rollout source of `trainer.mode` over this trainer's prompts, generator and reward scorer."""
        sampling = DynamicSampling(self.cfg)
        score = None if self.reward_scorer is None else self.reward_scorer.score
        collector = RolloutCollector(self.cfg, self.generator, sampling, score=score)
        mode = self.cfg.trainer.mode
        if mode == "sync":
            return SyncSource(self.cfg, self.prompts, collector)
        if mode == "one_step_off":
            return OneStepOffSource(self.cfg, self.prompts, collector)
        if mode == "fully_async":
            return FullyAsyncSource(self.cfg, self.prompts, collector, sampling)
        raise ValueError(f"trainer.mode must be sync, one_step_off or fully_async, got {mode!r}")

    def make_timeline(
        self, policy: WorkerGroup, critic: Optional[WorkerGroup], ref: Optional[WorkerGroup]
    ) -> RunTimeline:
        """The run's timeline recorder (`trainer.record_timeline`): the driver's phases, every rank and engine."""
        groups = {"policy": policy, "critic": critic, "ref": ref}
        groups = {role: group for role, group in groups.items() if group is not None}
        path = Path(os.path.expanduser(self.cfg.trainer.log_path)) / "timeline.jsonl"
        return RunTimeline(path, timeline_sources(groups, self.client.engines, self.weights.pauses))

    @property
    def used_uids(self) -> list[list[str]]:
        """Per step of this process, the dataset uids of the prompts it used up (`PromptSource.used_uids`)."""
        return self.prompts.used_uids

    @property
    def endpoint_gate(self):  # noqa: ANN201 - the run's OpenAI endpoint holds it open per request
        """The gate the run's OpenAI endpoint (if any) holds open per request (`WeightPublisher.gate`)."""
        return self.weights.gate

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
        self.weights.version = self.global_step  # the publish below serves version step + 1, as in an unbroken run
        await self.weights.publish()  # engines serve exactly the policy's (possibly resumed) weights
        groups = {"policy": self.policy.group, "ref": getattr(self.ref, "group", None)}
        groups["critic"] = getattr(self.critic, "group", None)
        groups["reward"] = getattr(self.reward_scorer, "reward_group", None)
        engines = list(getattr(self.client, "engines", []))
        self.memory = await MemoryMonitor.for_run(groups, engines, here=node_ip())
        if self.cfg.trainer.eval_before_train and self.global_step == 0:
            self.initial_eval = await self.evaluate()
            self.tracker.log(self.initial_eval, step=0)
        # Set-up's objects (libraries, Ray, configs) move to the permanent generation: the full collections the
        # steps' allocations trigger then scan only what the loop made.
        gc.collect()
        gc.freeze()
        gc.set_threshold(LOOP_GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])

    async def run_steps(self, max_steps: int) -> None:
        """Train step after step until `max_steps` or until the mode's rollout source runs out of data."""
        await self.source.start(self.global_step, max_steps)
        try:
            while self.global_step < max_steps:
                metrics = await self.step()
                if metrics is None:
                    break
                await self.after_step(metrics, max_steps)
        finally:
            await self.source.stop()

    async def step(self) -> Optional[dict[str, float]]:
        """One training step: the source's rollouts, learning on them, the new weights published to the engines.
        Returns its metrics; None when the data ran out."""
        taken = await self.source.next(self.global_step + 1, self.weights.version)
        if taken is None:
            return None
        self.global_step += 1
        timer, trained_version = taken.timer, self.weights.version
        with timer("step"):
            metrics, generated = await self.learn(taken.rollouts, timer)
            await self.source.before_publish(timer)
            if not self.plan.sync_in_update:
                with timer("weight_sync"):
                    metrics.update(await self.weights.publish())
        metrics.update(await self.source.done(taken, trained_version))
        return self.step_metrics(metrics, timer, generated)

    async def learn(self, rollouts: Rollouts, timer: PhaseTimer) -> tuple[dict[str, float], float]:
        """Everything of a step between its rollouts and publishing the weights: rewards, log-probs, KL, advantages,
        critic and policy updates (which publish the weights too when the plan sends them in the update). Returns
        the metrics and the count of generated tokens."""
        async with self.weights.engines_asleep():
            with timer("reward"):
                batch = TrainingBatch.from_trajectories(rollouts.output.trajectories, self.tokenizer.pad_token_id)
                metrics = self.rollout_metrics(rollouts)
            with timer("fwd_logprobs"):
                old_logprobs, ref_logprobs, values = await self.forward_passes(batch)
            if self.kl_controller is not None:
                metrics.update(self.apply_kl_in_reward(batch, old_logprobs, ref_logprobs))
            if self.algorithm.on_policy_distillation:
                metrics.update(self.apply_distillation_reward(batch, old_logprobs, ref_logprobs))
            with timer("advantages"):
                advantages, returns = self.advantages(batch, values)
            self.batch_dump.write(
                self.global_step, batch, timer, advantages, returns, old_logprobs, ref_logprobs, values
            )
            if self.critic is not None:
                with timer("train_critic"):
                    metrics.update(await self.critic.update(batch, returns, values))
            with timer("train_policy"):
                update = await self.update_policy(batch, advantages, old_logprobs, ref_logprobs)
                metrics.update(update.metrics)
            metrics.update(logprob_metrics(batch, update.old_logprobs, ref_logprobs))
        return metrics, float(batch.response_mask.sum())

    async def after_step(self, metrics: dict[str, float], max_steps: int) -> None:
        """Evaluate at `eval_interval`, log, check health, and checkpoint at `ckpt_interval`."""
        interval = self.cfg.trainer.eval_interval
        if interval > 0 and self.global_step % interval == 0 and self.global_step < max_steps:
            metrics.update(await self.evaluate())
        if self.memory is not None:
            metrics.update(await self.memory.sample())
        metrics.update(await prefix_cache_metrics(getattr(self.client, "engines", [])))
        self.tracker.log(metrics, step=self.global_step)
        if self.timeline is not None:
            await self.timeline.collect(self.global_step)
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
        it), the count of sampled prompt groups, and the prompts drawn but not trained yet (generated again first on
        resume)."""
        return {
            "kl_coef": None if self.kl_controller is None else self.kl_controller.value,
            "initial_eval": dict(self.initial_eval),
            "sampled_groups_total": self.sampled_groups_total,
            "pending_prompts": self.prompts.state(),
        }

    def restore_state(self, state: Optional[dict[str, Any]]) -> None:
        """Apply what `state()` saved (nothing when starting fresh)."""
        if not state:
            return
        if self.kl_controller is not None and state.get("kl_coef") is not None:
            self.kl_controller.value = float(state["kl_coef"])
        self.initial_eval = dict(state.get("initial_eval") or {})
        self.sampled_groups_total = int(state.get("sampled_groups_total") or 0)
        self.prompts.restore(state.get("pending_prompts"))

    def total_steps(self) -> int:
        """Steps in the run: `max_training_steps` if set, else epochs x batches per epoch."""
        return total_training_steps(self.cfg, self.train_loader)

    def step_metrics(self, metrics: dict[str, float], timer: PhaseTimer, generated: float) -> dict[str, float]:
        """Add the phase timings, throughput, step number and health observations to a step's metrics."""
        metrics.update(timer.metrics())
        if self.timeline is not None:
            self.timeline.add_phases(timer)
        metrics["trainer/tokens_per_second"] = generated / max(timer.seconds["step"], 1e-9)
        metrics["trainer/global_step"] = float(self.global_step)
        metrics.update(self.health.observe(self.global_step, metrics))
        return metrics

    # ----- phases -------------------------------------------------------------------------------------------------
    def rollout_metrics(self, rollouts: Rollouts) -> dict[str, float]:
        """`reward/*` of the step's rollouts plus the running count of sampled prompt groups."""
        metrics = reward_metrics(rollouts.output, self.n_samples)
        self.sampled_groups_total += rollouts.sampled_groups
        metrics["trainer/sampled_groups_total"] = float(self.sampled_groups_total)
        return metrics

    async def forward_passes(self, batch: TrainingBatch):
        """Old policy log-probs (only when the plan needs them before the update), reference log-probs (when KL is
        used) and critic values (when there is a critic), all at once."""
        calls = [self.policy.logprobs(batch)] if self.plan.old_logprobs_before_update else []
        if self.plan.reference == "ref_workers":
            calls.append(self.ref.logprobs(batch))
        elif self.plan.reference == "policy_base":  # LoRA: the base model with its adapters switched off
            calls.append(self.policy.base_logprobs(batch))
        if self.critic is not None:
            calls.append(self.critic.values(batch))
        results = list(await asyncio.gather(*calls))
        old = results.pop(0) if self.plan.old_logprobs_before_update else None
        ref = results.pop(0) if self.plan.reference is not None else None
        values = results.pop(0) if self.critic is not None else None
        return old, ref, values

    async def update_policy(self, batch: TrainingBatch, advantages, old_logprobs, ref_logprobs) -> PolicyUpdate:
        """The policy update, its old log-probs from where the plan says; when the plan sends the weights inside
        the update, the same call publishes them (their `weight_sync/*` metrics join the update's)."""
        old_from = self.plan.old_logprobs(len(self.policy.mini_batches(batch)))
        sync = await self.weights.in_update() if self.plan.sync_in_update else None
        update = await self.policy.update(batch, advantages, old_logprobs, ref_logprobs, old_from, sync)
        if sync is not None:
            update.metrics.update(await self.weights.finish_in_update(update.sync_parts))
        share = {"given": 0.0, "update": 1.0}.get(old_from, 1.0 / len(self.policy.mini_batches(batch)))
        update.metrics["policy/old_logprobs_from_update"] = share
        return update

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

    def apply_distillation_reward(
        self, batch: TrainingBatch, old_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor
    ) -> dict[str, float]:
        """On-policy distillation: the rewards become log p_teacher - log p_policy per generated token (the env's
        rewards, already logged, are dropped; `algorithms.kl.distillation_rewards`)."""
        batch.token_rewards, gap = distillation_rewards(old_logprobs, teacher_logprobs, batch.valid_response_mask)
        return {f"distillation/teacher_{name}": float(value) for name, value in gap.items()}

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
