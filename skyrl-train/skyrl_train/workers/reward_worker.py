"""`RewardModelWorker`: a frozen sequence-classification model that gives each token sequence one score."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoModelForSequenceClassification, PreTrainedModel

from skyrl_train.utils.compute_clock import timed_compute
from skyrl_train.workers.worker import BaseWorker


@dataclass
class ScoringBatch:
    """Reward-model inputs: one list of token ids (in the reward model's vocabulary) per row, unpadded."""

    token_ids: list[list[int]]

    def __post_init__(self) -> None:
        for row, ids in enumerate(self.token_ids):
            if not ids:
                raise ValueError(f"ScoringBatch row {row} has no tokens; every row needs at least one")

    def __len__(self) -> int:
        return len(self.token_ids)

    def select(self, indices: list[int]) -> ScoringBatch:
        """The rows at `indices`."""
        return ScoringBatch([self.token_ids[i] for i in indices])

    def padded(self, pad_token_id: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask, position_ids) [B, T], left-padded so every row's last token is in the last
        column; positions count from 0 at each row's first token."""
        width = max(len(ids) for ids in self.token_ids)
        input_ids = torch.full((len(self), width), pad_token_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for row, ids in enumerate(self.token_ids):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        return input_ids, attention, positions


def load_reward_model(path: str) -> PreTrainedModel:
    """An `AutoModelForSequenceClassification` with one label and a trained `score` head, in float32 on CPU.

    Refused, naming `reward.model.path`: a checkpoint whose `score` head is missing (e.g. a plain causal LM, which
    would get a random head), or an architecture without a decoder-style `score` head.
    """
    location = os.path.expanduser(path)
    local = os.path.isdir(location)
    try:
        config = AutoConfig.from_pretrained(location, num_labels=1, local_files_only=local)
        model, info = AutoModelForSequenceClassification.from_pretrained(
            location, config=config, dtype=torch.float32, local_files_only=local, output_loading_info=True
        )
    except (OSError, ValueError) as exc:
        raise OSError(f"could not load a reward model from reward.model.path={path!r}: {exc}") from exc
    head = getattr(model, "score", None)
    if not isinstance(head, torch.nn.Module):
        raise ValueError(
            f"reward.model.path={path!r} loads as {type(model).__name__}, which has no `score` head; reward models "
            "must be decoder-style ...ForSequenceClassification models (Llama, Qwen2, Qwen3, Mistral, ...)"
        )
    missing = [key for key in info.get("missing_keys", []) if key.startswith("score.")]
    if missing:
        raise ValueError(
            f"reward.model.path={path!r} has no trained score head (missing {missing}): it is not a reward model "
            "checkpoint; save one with AutoModelForSequenceClassification (num_labels=1)"
        )
    if model.config.get_text_config().pad_token_id is None:
        # the HF forward refuses batches without a pad id; its pooled output is not used here (see `score`)
        model.config.get_text_config().pad_token_id = -1
    return model.eval()


class RewardModelWorker(BaseWorker):
    """The reward model role: `score(batch) -> [B]`, the `score` head's output at each row's last token."""

    trainable = False

    def load_model(self, path: str) -> torch.nn.Module:
        """The sequence-classification model with its trained head."""
        return load_reward_model(path)

    def _check_supported(self) -> None:
        if self.section.sequence_parallel_size != 1:
            raise NotImplementedError(
                f"reward.model.sequence_parallel_size={self.section.sequence_parallel_size}: sequence parallelism "
                "is not supported for the reward model; set it to 1"
            )

    @timed_compute("forward")
    @torch.no_grad()
    def score(self, batch: ScoringBatch) -> torch.Tensor:
        """One float32 score per row (CPU). Rows go through in micro-batches of `reward.model.micro_batch_size_per_gpu`,
        each left-padded to its longest row; all ranks run the same number of forward passes (FSDP gathers weights in
        each), a rank with fewer micro-batches repeating its first row."""
        model = self._require_model()
        if len(batch) == 0:
            raise ValueError(f"RewardModelWorker rank {self.rank} got an empty batch; every rank needs >= 1 row")
        size = self.section.micro_batch_size_per_gpu
        starts = list(range(0, len(batch), size))
        count = torch.tensor([len(starts)], device=self.device)
        if dist.is_initialized() and self.world_size > 1:
            dist.all_reduce(count, op=dist.ReduceOp.MAX)
        captured: list[torch.Tensor] = []
        hook = model.score.register_forward_hook(lambda _module, _inputs, output: captured.append(output))
        scores = torch.zeros(len(batch), dtype=torch.float32)
        try:
            for step in range(int(count.item())):
                rows = list(range(starts[step], min(starts[step] + size, len(batch)))) if step < len(starts) else []
                input_ids, attention, positions = batch.select(rows or [0]).padded()
                captured.clear()
                model(
                    input_ids=input_ids.to(self.device),
                    attention_mask=attention.to(self.device),
                    position_ids=positions.to(self.device),
                    use_cache=False,
                )
                if rows:
                    scores[rows] = captured[-1][:, -1, 0].float().cpu()  # left padding: the last column
        finally:
            hook.remove()
        return scores
