"""Typed clients of the worker roles: what the trainer asks of the policy, the reference model and the critic.

Each client wraps the role's `WorkerGroup` and names its calls (`policy.logprobs(batch)`, `critic.update(...)`), so
no method-name strings or `**options` chains reach the training loop. An update splits the batch into mini-batches of
`<role>_mini_batch_size` prompts (x `n_samples_per_prompt` rows), gives each the reduction denominator of the whole
mini-batch, and runs `update_epochs_per_batch` passes over them in one call per rank (`train_mini_batches`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from skyrl_train.config.run_plan import OldLogprobs
from skyrl_train.training_batch import TrainingBatch
from skyrl_train.workers.accounting import reduction_denominator
from skyrl_train.workers.group import WorkerGroup
from skyrl_train.workers.worker import MiniBatchResult


@dataclass(frozen=True)
class SyncRequest:
    """Send the updated weights to the engines as `version` in the update's own call; `defer_install` leaves the
    engines' installation of the last chunk to their next generate call."""

    version: int
    defer_install: bool


@dataclass
class PolicyUpdate:
    """What a policy update returns: step metrics, the old log-probs it used (None when they were the update's own),
    and with a `SyncRequest` each rank's part of the weight send (`MiniBatchResult.weight_sync`)."""

    metrics: dict[str, float]
    old_logprobs: Optional[torch.Tensor] = None
    sync_parts: list[Any] = field(default_factory=list)


def mini_batches(num_rows: int, prompts_per_mini_batch: int, n_samples: int) -> list[list[int]]:
    """Row indices of each mini-batch: `prompts_per_mini_batch x n_samples` consecutive rows."""
    size = max(1, prompts_per_mini_batch * n_samples)
    return [list(range(start, min(start + size, num_rows))) for start in range(0, num_rows, size)]


def average_metrics(collected: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each metric over mini-batches."""
    keys = {key for metrics in collected for key in metrics}
    return {key: sum(m[key] for m in collected if key in m) / sum(key in m for m in collected) for key in keys}


class TrainedRole:
    """A role with an optimizer (policy, critic): its group and the update settings of `cfg.trainer`."""

    def __init__(self, group: Optional[WorkerGroup], role: str, cfg: Any) -> None:
        self.group, self.role = group, role
        trainer = cfg.trainer
        self.prompts_per_mini_batch: int = getattr(trainer, f"{role}_mini_batch_size")
        self.n_samples: int = cfg.generator.n_samples_per_prompt
        self.epochs: int = trainer.update_epochs_per_batch
        self.loss_reduction: str = trainer.algorithm.loss_reduction
        self.max_seq_len: Optional[int] = trainer.algorithm.max_seq_len

    def mini_batches(self, batch: TrainingBatch) -> list[list[int]]:
        """Row indices of each of this role's mini-batches of `batch`."""
        return mini_batches(len(batch), self.prompts_per_mini_batch, self.n_samples)

    def loss_denominator(self, loss_mask: torch.Tensor) -> float:
        """What `trainer.algorithm.loss_reduction` divides by over one whole mini-batch (before it is split over the
        data-parallel ranks), so every rank normalises by the same number."""
        return reduction_denominator(self.loss_reduction, loss_mask, self.max_seq_len)

    async def train(
        self, batch: TrainingBatch, per_row: dict[str, Optional[torch.Tensor]], **options: Any
    ) -> tuple[dict[str, float], list[MiniBatchResult]]:
        """`update_epochs_per_batch` passes over the mini-batches: `forward_backward` on each (with those rows of
        every `per_row` tensor, None stays None), then an optimizer step, in one `train_mini_batches` call per rank.
        Returns the metrics averaged over the steps (with `<role>/grad_norm`) and each mini-batch's result."""
        calls = []
        for rows in self.mini_batches(batch):
            if len(rows) == len(batch):  # one mini-batch: the whole batch as it is (sharding copies the rows anyway)
                batch_kwargs, mini_batch = dict(per_row), batch
            else:
                index = torch.tensor(rows)
                batch_kwargs = {name: None if values is None else values[index] for name, values in per_row.items()}
                mini_batch = batch.select(rows)
            batch_kwargs["loss_denominator"] = self.loss_denominator(mini_batch.loss_mask)
            calls.append((mini_batch, batch_kwargs))
        results = await self.group.run_sharded_each_async("train_mini_batches", calls, epochs=self.epochs, **options)
        return average_metrics([step for result in results for step in result.steps]), results


class PolicyClient(TrainedRole):
    """The policy's ranks: log-probs, the base model's log-probs (LoRA reference), updates and weight sends."""

    def __init__(self, group: Optional[WorkerGroup], cfg: Any) -> None:
        super().__init__(group, "policy", cfg)

    async def logprobs(self, batch: TrainingBatch) -> torch.Tensor:
        """Per-token log-probs of the batch's responses under the current weights."""
        return await self.group.run_sharded_async("forward", batch)

    async def base_logprobs(self, batch: TrainingBatch) -> torch.Tensor:
        """Log-probs of the base model with the LoRA adapters off: a LoRA run's reference policy."""
        return await self.group.run_sharded_async("forward_base", batch)

    async def update(
        self,
        batch: TrainingBatch,
        advantages: torch.Tensor,
        old_logprobs: Optional[torch.Tensor],
        ref_logprobs: Optional[torch.Tensor],
        old_from: OldLogprobs,
        sync: Optional[SyncRequest] = None,
    ) -> PolicyUpdate:
        """`update_epochs_per_batch` passes of the policy objective over the mini-batches, the old log-probs taken
        as `old_from` says; with `sync`, the same call then sends the new weights to the engines."""
        per_row = {"advantages": advantages, "old_logprobs": old_logprobs, "ref_logprobs": ref_logprobs}
        options: dict[str, Any] = {"old_logprobs_first": True} if old_from == "first_pass" else {}
        if old_from != "first_pass":
            options["on_policy"] = old_from == "update"
        if sync is not None:
            options["sync_weights_version"] = sync.version
            options["defer_weight_install"] = sync.defer_install
        metrics, results = await self.train(batch, per_row, **options)
        if old_from == "first_pass":
            old_logprobs = torch.zeros_like(batch.response_mask, dtype=torch.float32)
            for rows, result in zip(self.mini_batches(batch), results):
                old_logprobs[torch.tensor(rows)] = result.old_logprobs
        if old_from == "update" and "policy/logprob_diff_vs_rollout" in metrics:
            # the update's forward is the trainer's only look at this batch: report its engine difference
            metrics["policy/rollout_train_logprob_abs_diff_mean"] = metrics["policy/logprob_diff_vs_rollout"]
        sync_parts = list(results[-1].weight_sync or []) if sync is not None else []
        return PolicyUpdate(metrics, old_logprobs, sync_parts)

    async def send_weights(self, version: int) -> dict[str, Any]:
        """Send the current weights to the engines as `version` (a call of its own); rank 0's send report."""
        reports = await asyncio.to_thread(self.group.run_all, "sync_weights", version)
        return reports[0]


class CriticClient(TrainedRole):
    """The critic's ranks: values and updates."""

    def __init__(self, group: Optional[WorkerGroup], cfg: Any) -> None:
        super().__init__(group, "critic", cfg)

    async def values(self, batch: TrainingBatch) -> torch.Tensor:
        """Per-token values of the batch's responses."""
        return await self.group.run_sharded_async("forward", batch)

    async def update(self, batch: TrainingBatch, returns: torch.Tensor, values: torch.Tensor) -> dict[str, float]:
        """Mini-batch updates on the returns, clipped around the values it predicted before the update."""
        metrics, _ = await self.train(batch, {"returns": returns, "old_values": values})
        return metrics


class ReferenceClient:
    """The reference model's ranks (forward only)."""

    def __init__(self, group: WorkerGroup) -> None:
        self.group = group

    async def logprobs(self, batch: TrainingBatch) -> torch.Tensor:
        """Per-token log-probs of the batch's responses under the reference model."""
        return await self.group.run_sharded_async("forward", batch)
