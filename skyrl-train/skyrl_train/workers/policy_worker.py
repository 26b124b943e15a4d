"""`PolicyWorker` (log-probs, policy-gradient update) and `RefWorker` (frozen reference log-probs)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Optional

import torch

from skyrl_train.algorithms.masked import masked_count
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.training_batch import TrainingBatch
from skyrl_train.utils.compute_clock import timed_compute
from skyrl_train.weight_sync.base import SendResult
from skyrl_train.weight_sync.strategy import WeightSenderHost
from skyrl_train.workers.accounting import MetricAccumulator, micro_batch_weight
from skyrl_train.workers.micro_batching import TrimmedMicroBatch, write_response_rows
from skyrl_train.workers.policy_objective import ObjectiveSettings, policy_objective
from skyrl_train.workers.shard_send import PresumedWrite, ShardedSend
from skyrl_train.workers.worker import BaseWorker, MiniBatchResult


class LogprobWorker(BaseWorker):
    """A causal-LM worker that scores response tokens: `forward(batch) -> log-probs [B, R]`."""

    packable = True

    @property
    def temperature(self) -> float:
        """Sampling temperature of training rollouts (`generator.sampling_params.temperature`): log-probs are taken
        under the distribution the engine sampled from."""
        return self.cfg.generator.sampling_params.temperature

    @property
    def shares_prompt_forward(self) -> bool:
        """Whether log-prob passes run each distinct prompt once (`trainer.share_prompt_forward`): packed, whenever
        the key is on; padded, on fsdp2 workers without gradient checkpointing (which turns the key/value cache
        off)."""
        model = self._require_model()
        if self.packs_rows:
            return self.cfg.trainer.share_prompt_forward
        return (
            self.cfg.trainer.share_prompt_forward
            and self.cfg.trainer.strategy == "fsdp2"
            and not getattr(model, "is_gradient_checkpointing", False)
        )

    def _logprobs(
        self, micro: TrimmedMicroBatch, with_entropy: bool, model: Any = None
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        batch = micro.batch
        return response_logprobs(
            self.model if model is None else model,
            batch.input_ids,
            batch.attention_mask,
            batch.position_ids,
            batch.prompt_width,
            temperature=self.temperature,
            with_entropy=with_entropy,
            share_prompts=self.shares_prompt_forward,
            pack=self.packs_rows,
            sequence_group=self.sequence_group,
            bucket_length=self.buckets_packed_lengths,
        )

    @timed_compute("forward")
    def forward(self, batch: TrainingBatch) -> torch.Tensor:
        """Log-probs [B, R] (float32, CPU) of the response tokens; 0 outside `response_mask`."""
        return self.score_rows(batch, lambda micro, model: self._logprobs(micro, False, model)[0])


class RefWorker(LogprobWorker):
    """The frozen reference model: `forward` only."""

    trainable = False


def _detached(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else value


def _rows(tensor: Optional[torch.Tensor], indices: list[int], micro: TrimmedMicroBatch, device: torch.device):
    if tensor is None:
        return None
    return micro.slice_response(tensor[indices or [0]]).to(device)


class PolicyWorker(WeightSenderHost, LogprobWorker):
    """The trained policy: `forward`, `forward_backward` (gradient accumulation over micro-batches), `optim_step`,
    and `sync_weights` to the inference engines (rank 0 holds the weight-sync sender)."""

    trainable = True
    _shard_send: Optional[ShardedSend] = None

    def sync_weights(self, version: int) -> Optional[dict[str, Any]]:
        """Send the weights to the engines as `version`; every rank takes part (`_send_weights`: each rank writes its
        own rows into an `shm` block, else rank 0 gathers them). A LoRA policy sends only its adapters: the engines
        hold the same frozen base weights.

        Returns rank 0's send report (`version`, `num_bytes`, `seconds`, `checksums`, and `served_versions`: the
        versions the engines acknowledged, for the driver's `confirm`), None on other ranks.
        """
        result = self._send_weights(version)
        return None if result is None else result.report()

    def _send_weights(self, version: int, defer_install: bool = False) -> Optional[SendResult | PresumedWrite]:
        """Every rank: send the weights as `version`; rank 0's `SendResult`, None elsewhere. With an `shm` sender
        and an FSDP2 model every rank writes its own rows into the shared block (`workers.shard_send`), else rank 0
        gathers the model and sends it. `defer_install` leaves the final chunk of a sharded send for the engines to
        install at their next generate (`SendResult.deferred`); the gathered send ignores it (the engines install
        every chunk before it returns). A deferred sharded send with a one-chunk plan agreed earlier is presumed on
        every rank (`ShardedSend.send_presumed`: no collective; each rank returns a `PresumedWrite`, which the driver
        checks with `update_send`)."""
        writable = getattr(self.strategy, "shard_writable_state", None)
        state = writable() if writable is not None and not self.uses_lora else None  # alike on every rank
        if state is not None:
            if self._shard_send is None:
                self._shard_send = ShardedSend(self.rank, self.world_size)
            sender = self.weight_sender if self.rank == 0 else None
            if self._shard_send.can_presume(defer_install):
                return self._shard_send.send_presumed(state, sender, version)
            plan = self._shard_send.agree(self._shard_send.propose(sender, state, version) if self.rank == 0 else None)
            if plan is not None:
                return self._shard_send.send(state, sender, version, defer_final=defer_install)
        dtype = self.weight_sender.dtype if self.rank == 0 else None
        named = self.get_weights(dtype, trainable_only=self.uses_lora)
        if self.rank != 0:
            return None
        return self.weight_sender.send(named, version)

    def train_mini_batches(
        self,
        mini_batches: list[tuple[TrainingBatch, dict[str, Any]]],
        epochs: int = 1,
        old_logprobs_first: bool = False,
        sync_weights_version: Optional[int] = None,
        defer_weight_install: bool = False,
        **options: Any,
    ) -> list[MiniBatchResult]:
        """`BaseWorker.train_mini_batches`; with `old_logprobs_first`, the update also computes the old policy's
        log-probs, which come back in each `MiniBatchResult.old_logprobs`: the trainer then ships the batch once,
        instead of once for a separate forward call and again for the update. The first mini-batch's come from its
        own first `forward_backward` (no optimizer step has run yet, so the weights are still the old policy: its
        ratio is 1, as in an on-policy step), so this rank runs one `forward` over its other mini-batch shards only,
        before the first optimizer step; later epochs train against the kept log-probs.

        With `sync_weights_version`, the updated weights are then sent to the engines as that version in the same
        call (`sync_weights`; each rank's part of the send comes back in the last result's `weight_sync`, which the
        caller reads with `shard_send.update_send`): the trainer's
        step saves the round trip to every rank that a separate sync call costs. `defer_weight_install` leaves the
        engines' installation of the last chunk to their next generate call (see `_send_weights`)."""
        results = self._train(mini_batches, epochs, old_logprobs_first, **options)
        if sync_weights_version is not None and results:
            sent = self._send_weights(sync_weights_version, defer_install=defer_weight_install)
            results[-1] = results[-1]._replace(weight_sync=sent)
        return results

    def _train(
        self,
        mini_batches: list[tuple[TrainingBatch, dict[str, Any]]],
        epochs: int,
        old_logprobs_first: bool,
        **options: Any,
    ) -> list[MiniBatchResult]:
        if not old_logprobs_first:
            return super().train_mini_batches(mini_batches, epochs, **options)
        if any(batch_kwargs.get("old_logprobs") is not None for _, batch_kwargs in mini_batches):
            raise ValueError("train_mini_batches: old_logprobs_first=True computes old_logprobs; pass None")
        first, later = mini_batches[0][0], [batch for batch, _ in mini_batches[1:]]
        olds = [torch.zeros(len(first), first.response_width, dtype=torch.float32)]  # filled by its first pass
        if later:
            together = self.forward(TrainingBatch.concat(later))
            olds += [old.clone() for old in together.split([len(batch) for batch in later])]  # pickled alone
        steps: list[list[dict[str, float]]] = [[] for _ in mini_batches]
        for epoch in range(epochs):
            for index, (batch, batch_kwargs) in enumerate(mini_batches):
                if epoch == 0 and index == 0:
                    kwargs = {**batch_kwargs, "on_policy": True, "logprobs_out": olds[0]}
                else:
                    kwargs = {**batch_kwargs, "old_logprobs": olds[index]}
                steps[index].append(self.forward_backward_step(batch, **kwargs, **options))
        return [MiniBatchResult(tuple(metrics), old_logprobs=old) for metrics, old in zip(steps, olds)]

    def forward_base(self, batch: TrainingBatch) -> torch.Tensor:
        """Log-probs of the base model with the LoRA adapters switched off: the reference policy of a LoRA run, with
        no second copy of the weights (`forward` of a ref worker otherwise)."""
        if not self.uses_lora:
            raise RuntimeError(
                "forward_base needs a LoRA policy (trainer.policy.model.lora.rank > 0); a full fine-tune keeps its "
                "reference model in a ref worker group"
            )
        with self._require_model().disable_adapter():
            return self.forward(batch)

    @timed_compute("forward_backward")
    def forward_backward(
        self,
        batch: TrainingBatch,
        advantages: Optional[torch.Tensor],
        old_logprobs: Optional[torch.Tensor],
        ref_logprobs: Optional[torch.Tensor] = None,
        loss_fn: Optional[str] = None,
        loss_fn_config: Optional[Mapping[str, Any]] = None,
        loss_denominator: Optional[float] = None,
        on_policy: bool = False,
        logprobs_out: Optional[torch.Tensor] = None,
    ) -> dict[str, float]:
        """Accumulate the gradient of the objective over this rank's mini-batch shard; returns `policy/*` metrics.

        `on_policy=True` (with `old_logprobs=None`) says the weights are still those that sampled the batch's
        "old" policy, as in a step with one optimizer step: the old log-probs are then this pass's own log-probs,
        detached (the ratio is 1 and its gradient is the plain policy gradient), which saves a separate forward.
        `logprobs_out` (a float32 [B, R] tensor) receives this pass's log-probs, detached, 0 outside
        `response_mask` (what `forward` returns), so that later passes over the batch can train against them.

        The policy loss is `loss_fn` (default `trainer.algorithm.policy_loss_type`) with `PolicyLossConfig` fields
        from `trainer.algorithm`, overridden by `loss_fn_config`; plus `kl_loss_coef * KL(ref)` when `use_kl_loss`
        and the entropy bonus when `use_entropy_loss`. Rows go in micro-batches of
        `micro_train_batch_size_per_gpu` (or by `max_tokens_per_microbatch`); each micro-batch's loss is weighted by
        its share of the reduction denominator of the whole mini-batch over every data-parallel rank
        (`loss_denominator`, else summed across ranks), so the gradient does not depend on how rows are split into
        micro-batches or across ranks: 1 rank and N ranks give the same update. Gradients are kept until
        `optim_step`.
        """
        model = self._require_model()
        stale_data = self.cfg.trainer.mode != "sync"
        settings = ObjectiveSettings.from_config(self.cfg.trainer.algorithm, loss_fn, loss_fn_config, stale_data)
        if settings.kl_loss_coef is not None and ref_logprobs is None:  # checked before any collective starts
            raise ValueError("trainer.algorithm.use_kl_loss is true but forward_backward got ref_logprobs=None")
        if on_policy and old_logprobs is not None:
            raise ValueError(
                "forward_backward: on_policy=True takes old_logprobs from this pass; pass old_logprobs=None"
            )
        reduction, max_seq_len = settings.loss_config.loss_reduction, settings.loss_config.max_seq_len
        denominator = self.mini_batch_denominator(reduction, batch.loss_mask, max_seq_len, loss_denominator)
        scale = self.gradient_average_factor
        model.train()
        plan = self.micro_batches(batch, self.cfg.trainer.micro_train_batch_size_per_gpu)

        def body(entry: tuple[list[int], TrimmedMicroBatch], call: Any) -> tuple[torch.Tensor, tuple]:
            indices, micro = entry
            log_probs, entropy = self._logprobs(micro, with_entropy=True, model=call)
            if settings.entropy_coef is None:
                entropy = entropy.detach()
            result = policy_objective(
                settings,
                log_probs,
                entropy,
                micro.batch.loss_mask,
                advantages=_rows(advantages, indices, micro, self.device),
                old_log_probs=log_probs.detach() if on_policy else _rows(old_logprobs, indices, micro, self.device),
                ref_log_probs=_rows(ref_logprobs, indices, micro, self.device),
                rollout_log_probs=micro.batch.rollout_logprobs,
            )
            loss_mask = micro.batch.loss_mask
            weight = micro_batch_weight(reduction, loss_mask, denominator, max_seq_len) * scale if indices else 0.0
            parts_of = {name: float(value) for name, value in result.parts.items()}
            metrics_of = {name: _detached(value) for name, value in result.metrics.items()}
            return result.total * weight, (log_probs.detach(), parts_of, metrics_of, weight)

        accumulator, parts = MetricAccumulator(), defaultdict(float)
        results = self.strategy.run_micro_batches(model, plan, body, inputs=self.model_inputs)
        for (indices, micro), (log_probs, parts_of, metrics_of, weight) in zip(plan, results):
            if logprobs_out is not None:
                write_response_rows(logprobs_out, indices, log_probs.to(micro.batch.loss_mask.device), micro)
            for name, value in parts_of.items():  # reported once per sequence-parallel group
                parts[name] += value * weight / self.sequence_parallel_size
            if indices:
                accumulator.add(metrics_of, weight=float(masked_count(micro.batch.loss_mask)))
        metrics = {f"policy/{name}": value for name, value in accumulator.result().items()}
        metrics.update({f"policy/{name}": value for name, value in parts.items()})
        metrics["policy/lr"] = self.strategy.lr
        return metrics
