"""Micro-batches of a worker's shard: rows grouped by count or by a token budget, and all-padding columns trimmed.

A `TrainingBatch` row is `[pad.. prompt | response ..pad]` with every prompt ending at column `prompt_width`. Within a
micro-batch, the leading columns where every row is prompt padding and the trailing columns where every row is
response padding carry nothing: `trim_padding_columns` drops them before the forward pass. This is exact (position
ids are stored per row, and the dropped keys were masked out anyway); only the matmul shapes change.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from skyrl_train.algorithms.masked import zero_masked
from skyrl_train.models.packing import prompt_groups
from skyrl_train.training_batch import TrainingBatch

_RESPONSE_FIELDS = ("response_mask", "loss_mask", "token_rewards", "rollout_logprobs")
_SEQUENCE_FIELDS = ("input_ids", "attention_mask", "position_ids")


def row_lengths(batch: TrainingBatch) -> tuple[list[int], list[int]]:
    """(prompt lengths, response lengths) of every row, counted from the attention mask."""
    prompt = batch.attention_mask[:, : batch.prompt_width].sum(dim=1)
    response = batch.attention_mask[:, batch.prompt_width :].sum(dim=1)
    return prompt.tolist(), response.tolist()


def fixed_size_groups(num_rows: int, micro_batch_size: int) -> list[list[int]]:
    """Consecutive row indices in groups of `micro_batch_size` (the last group may be smaller)."""
    if micro_batch_size <= 0:
        raise ValueError(f"micro batch size must be a positive number of sequences, got {micro_batch_size}")
    return [
        list(range(start, min(start + micro_batch_size, num_rows))) for start in range(0, num_rows, micro_batch_size)
    ]


def token_budget_groups(prompt_lengths: list[int], response_lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Rows packed into groups whose padded size fits `max_tokens`.

    The padded size of a group is `rows * (longest prompt + longest response)`: the tokens a padded forward pass
    over the trimmed micro-batch really processes. Rows are taken longest first and added to the open group while it
    fits; a row that alone exceeds the budget gets a group of its own. Indices inside a group are sorted.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens_per_microbatch must be > 0 to pack by tokens, got {max_tokens}")
    if len(prompt_lengths) != len(response_lengths):
        raise ValueError(f"{len(prompt_lengths)} prompt lengths but {len(response_lengths)} response lengths")
    order = sorted(range(len(prompt_lengths)), key=lambda i: (-(prompt_lengths[i] + response_lengths[i]), i))
    groups: list[list[int]] = []
    current: list[int] = []
    longest_prompt = longest_response = 0
    for index in order:
        prompt_max = max(longest_prompt, prompt_lengths[index])
        response_max = max(longest_response, response_lengths[index])
        if current and (len(current) + 1) * (prompt_max + response_max) > max_tokens:
            groups.append(sorted(current))
            current, prompt_max, response_max = [], prompt_lengths[index], response_lengths[index]
        current.append(index)
        longest_prompt, longest_response = prompt_max, response_max
    if current:
        groups.append(sorted(current))
    return groups


def packed_token_groups(
    prompt_lengths: list[int], response_lengths: list[int], prompt_keys: list[int], max_tokens: int
) -> list[list[int]]:
    """Consecutive rows in groups whose packed size fits `max_tokens`.

    The packed size of a group is the tokens a packed forward runs (`models.packing`): each row's response but its
    last token, plus its prompt unless an earlier row of the group has the same `prompt_keys` entry (the samples of
    one GRPO group share their prompt). Rows keep their order, so a prompt's samples stay together; a row that alone
    exceeds the budget gets a group of its own.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens_per_microbatch must be > 0 to pack by tokens, got {max_tokens}")
    if not len(prompt_lengths) == len(response_lengths) == len(prompt_keys):
        raise ValueError(
            f"{len(prompt_lengths)} prompt lengths, {len(response_lengths)} response lengths and "
            f"{len(prompt_keys)} prompt keys: expected one of each per row"
        )
    groups: list[list[int]] = []
    current: list[int] = []
    seen: set[int] = set()
    size = 0
    for index, (prompt, response, key) in enumerate(zip(prompt_lengths, response_lengths, prompt_keys)):
        own = max(response - 1, 0)
        cost = own + (0 if key in seen else prompt)
        if current and size + cost > max_tokens:
            groups.append(current)
            current, seen, size, cost = [], set(), 0, own + prompt
        current.append(index)
        seen.add(key)
        size += cost
    if current:
        groups.append(current)
    return groups


def micro_batch_groups(
    batch: TrainingBatch,
    micro_batch_size: int,
    max_tokens_per_microbatch: int,
    packed: bool = False,
    share_prompts: bool = False,
) -> list[list[int]]:
    """Row indices of each micro-batch: by token budget when `max_tokens_per_microbatch > 0`, else by count. The
    budget counts the tokens the forward runs: packed (`packed`; with `share_prompts`, a prompt repeated within a
    micro-batch counted once), or padded."""
    if max_tokens_per_microbatch > 0:
        prompt_lengths, response_lengths = row_lengths(batch)
        if packed:
            if share_prompts:
                keys = prompt_groups(batch.input_ids, batch.attention_mask, batch.prompt_width).tolist()
            else:
                keys = list(range(len(batch)))
            return packed_token_groups(prompt_lengths, response_lengths, keys, max_tokens_per_microbatch)
        return token_budget_groups(prompt_lengths, response_lengths, max_tokens_per_microbatch)
    return fixed_size_groups(len(batch), micro_batch_size)


@dataclass
class TrimmedMicroBatch:
    """A micro-batch with its all-padding columns removed; `response_width` is how many response columns remain."""

    batch: TrainingBatch
    response_width: int

    def slice_response(self, tensor: torch.Tensor | None) -> torch.Tensor | None:
        """Keep the first `response_width` columns of a [rows, R] per-token tensor (None stays None)."""
        return None if tensor is None else tensor[:, : self.response_width]


def trim_padding_columns(batch: TrainingBatch) -> TrimmedMicroBatch:
    """Drop leading columns that are padding in every row and trailing response columns that are padding in every
    row. At least one prompt column and one response column are kept."""
    prompt_lengths, response_lengths = row_lengths(batch)
    keep_prompt = max(1, max(prompt_lengths, default=0))
    keep_response = max(1, max(response_lengths, default=0))
    start = batch.prompt_width - min(keep_prompt, batch.prompt_width)
    stop = batch.prompt_width + min(keep_response, batch.response_width)
    values = {name: getattr(batch, name)[:, start:stop] for name in _SEQUENCE_FIELDS}
    response_width = stop - batch.prompt_width
    for name in _RESPONSE_FIELDS:
        tensor = getattr(batch, name)
        values[name] = None if tensor is None else tensor[:, :response_width]
    trimmed = TrainingBatch(prompt_width=batch.prompt_width - start, uids=list(batch.uids), valid=batch.valid, **values)
    return TrimmedMicroBatch(batch=trimmed, response_width=response_width)


def pad_response_columns(values: torch.Tensor, response_width: int, fill: float = 0.0) -> torch.Tensor:
    """Right-pad a [rows, r] tensor with `fill` to [rows, response_width] (undoes the response trimming)."""
    missing = response_width - values.shape[1]
    if missing < 0:
        raise ValueError(f"values have {values.shape[1]} response columns, more than the batch's {response_width}")
    if missing == 0:
        return values
    padding = torch.full((values.shape[0], missing), fill, dtype=values.dtype, device=values.device)
    return torch.cat([values, padding], dim=1)


def write_response_rows(
    output: torch.Tensor, indices: list[int], scores: torch.Tensor, micro: TrimmedMicroBatch
) -> None:
    """Put a micro-batch's per-token scores (detached, float32, 0 outside `response_mask`) into rows `indices` of
    `output` [B, R]; a padding micro-batch (no indices) writes nothing."""
    if indices:
        kept = zero_masked(scores.detach().float(), micro.batch.response_mask).cpu()
        output[indices] = pad_response_columns(kept, output.shape[1])


def balance_group_counts(groups: list[list[int]], target: int) -> list[list[int]]:
    """Split the largest groups in two until there are `target` groups; add empty groups (dummy micro-batches) when
    no group can be split. FSDP ranks must run the same number of forward/backward passes, so every rank brings its
    micro-batch count up to the largest one."""
    if len(groups) > target:
        raise ValueError(f"cannot shrink {len(groups)} micro-batches to {target}; target must be >= the current count")
    balanced = [list(group) for group in groups]
    while len(balanced) < target:
        largest = max(range(len(balanced)), key=lambda i: len(balanced[i]), default=None)
        if largest is None or len(balanced[largest]) < 2:
            balanced.append([])
            continue
        group = balanced.pop(largest)
        half = len(group) // 2
        balanced[largest:largest] = [group[:half], group[half:]]
    return balanced
