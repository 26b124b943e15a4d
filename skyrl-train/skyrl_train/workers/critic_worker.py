"""`CriticWorker`: a causal-LM backbone with a scalar value head, trained with the clipped value loss."""

from __future__ import annotations

import os
import warnings
from collections import defaultdict
from typing import Any, Optional

import torch
from transformers import AutoConfig, AutoModelForTokenClassification, PreTrainedModel

from skyrl_train.algorithms.masked import masked_count, masked_mean
from skyrl_train.algorithms.value_loss import value_loss
from skyrl_train.models.packing import packed_token_scores
from skyrl_train.models.ulysses import sharded_token_scores
from skyrl_train.training_batch import TrainingBatch
from skyrl_train.utils.compute_clock import timed_compute
from skyrl_train.workers.accounting import MetricAccumulator, micro_batch_weight
from skyrl_train.workers.micro_batching import TrimmedMicroBatch
from skyrl_train.workers.worker import BaseWorker


def load_value_model(path: str) -> PreTrainedModel:
    """A token-classification model with one label (the value head `score`) on the backbone stored at `path`.

    A causal-LM checkpoint loads its backbone and gets a freshly initialised head (seed the RNG first); dropout
    before the head is disabled so values are deterministic.
    """
    location = os.path.expanduser(path)
    local = os.path.isdir(location)
    try:
        config = AutoConfig.from_pretrained(location, num_labels=1, local_files_only=local)
        config.classifier_dropout = 0.0
        return AutoModelForTokenClassification.from_pretrained(
            location, config=config, dtype=torch.float32, local_files_only=local
        )
    except OSError as exc:
        raise OSError(f"could not load a value model from trainer.critic.model.path={path!r}: {exc}") from exc


class CriticWorker(BaseWorker):
    """The value model: `forward(batch) -> values [B, R]`, `forward_backward(batch, returns, old_values)`."""

    trainable = True
    packable = True
    lora_options = {"task_type": "TOKEN_CLS", "modules_to_save": ["score"]}
    """With `trainer.critic.model.lora`, the adapters train and so does the whole value head (it starts random)."""

    def load_model(self, path: str) -> torch.nn.Module:
        """Backbone + scalar value head."""
        # The head's [B, T, 1] output is a reshaped view; nothing here modifies it in place, so FSDP2's advice about
        # in-place ops on views does not apply.
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
        return load_value_model(path)

    def _values(self, micro: TrimmedMicroBatch, model: Any = None) -> torch.Tensor:
        """Value of the state before each response token: the head's output at the position preceding it (`model`:
        the one to call, default this worker's)."""
        model = self.model if model is None else model
        batch = micro.batch
        if self.packs_rows:
            packed = self.pack_micro_batch(batch)
            if self.sequence_group is not None:
                return sharded_token_scores(model, packed, self.sequence_group)
            return packed_token_scores(model, packed)
        scores = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
        ).logits
        start = batch.prompt_width - 1
        return scores[:, start : start + micro.response_width, 0].float()

    @timed_compute("forward")
    def forward(self, batch: TrainingBatch) -> torch.Tensor:
        """Values [B, R] (float32, CPU); 0 outside `response_mask`."""
        return self.score_rows(batch, self._values)

    @timed_compute("forward_backward")
    def forward_backward(
        self,
        batch: TrainingBatch,
        returns: torch.Tensor,
        old_values: torch.Tensor,
        loss_denominator: Optional[float] = None,
    ) -> dict[str, float]:
        """Accumulate the gradient of the clipped value loss (`trainer.algorithm.value_clip`, reduced with
        `loss_reduction`) over `loss_mask`; returns `critic/*` metrics. Micro-batches and ranks are weighted like the
        policy's (see `PolicyWorker.forward_backward`)."""
        model = self._require_model()
        algorithm = self.cfg.trainer.algorithm
        reduction, max_seq_len = algorithm.loss_reduction, algorithm.max_seq_len
        denominator = self.mini_batch_denominator(reduction, batch.loss_mask, max_seq_len, loss_denominator)
        scale = self.gradient_average_factor
        model.train()
        accumulator, totals = MetricAccumulator(), defaultdict(float)
        for indices, micro in self.micro_batches(batch, self.cfg.trainer.micro_train_batch_size_per_gpu):
            rows = indices or [0]
            loss_mask = micro.batch.loss_mask
            values = self._values(micro)
            loss, clip_frac = value_loss(
                values,
                micro.slice_response(old_values[rows]).to(self.device),
                micro.slice_response(returns[rows]).to(self.device),
                loss_mask,
                value_clip=algorithm.value_clip,
                loss_reduction=reduction,
                max_seq_len=max_seq_len,
            )
            weight = micro_batch_weight(reduction, loss_mask, denominator, max_seq_len) * scale if indices else 0.0
            self.strategy.backward(loss * weight)
            totals["critic/value_loss"] += float(loss.detach()) * weight / self.sequence_parallel_size
            if indices:
                micro_metrics = {
                    "critic/value_clip_frac": clip_frac,
                    "critic/values_mean": masked_mean(values.detach(), loss_mask),
                }
                accumulator.add(micro_metrics, weight=float(masked_count(loss_mask)))
        metrics = {**accumulator.result(), **totals}
        metrics["critic/lr"] = self.strategy.lr
        return metrics
