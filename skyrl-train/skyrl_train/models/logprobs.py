"""Per-token log-probabilities (and entropy) of response tokens under a causal LM, as the trainer computes them.

Rows that repeat a prompt (the samples of one GRPO group) can share the prompt's forward pass: the distinct prompts
run once with a key/value cache, the cache is expanded to every row, and only the responses run per row. The
log-probs, entropies and gradients are those of the full forward (the same attention over the same keys; only the
float summation order differs); the prompt tokens are computed once per group instead of once per row.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from skyrl_train.algorithms.entropy import entropy_from_logits
from skyrl_train.models.packing import pack_rows, packed_response_logprobs
from skyrl_train.models.ulysses import sharded_response_logprobs

MAX_SHARED_PROMPT_FRACTION = 0.5
"""Share prompts only when the distinct prompts are at most this fraction of the rows (below it the saving is small
and two model calls cost more than one)."""


def shared_prompts(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, prompt_width: int
) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """(one row index per distinct prompt, each row's index into those) when rows repeat prompts often enough to
    share them (`MAX_SHARED_PROMPT_FRACTION`), else None. Two rows share a prompt when their prompt columns agree in
    token ids, attention mask and position ids."""
    rows = input_ids.shape[0]
    if prompt_width == 0 or rows < 2 or input_ids.shape[1] == prompt_width:
        return None
    columns = slice(0, prompt_width)
    keys = torch.cat(
        [input_ids[:, columns], attention_mask[:, columns].to(input_ids.dtype), position_ids[:, columns]], dim=1
    )
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    count = int(inverse.max()) + 1
    if count > MAX_SHARED_PROMPT_FRACTION * rows:
        return None
    device = inverse.device
    first = torch.full((count,), rows, dtype=torch.long, device=device).scatter_reduce(
        0, inverse, torch.arange(rows, device=device), reduce="amin", include_self=True
    )
    return first, inverse


def _response_logits_shared(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    prompt_width: int,
    first: torch.Tensor,
    inverse: torch.Tensor,
) -> torch.Tensor:
    """Logits [B, R, V] that predict the response tokens, with each distinct prompt run once (see module doc)."""
    prompt = slice(0, prompt_width)
    prompt_out = model(
        input_ids=input_ids[first, prompt],
        attention_mask=attention_mask[first, prompt],
        position_ids=position_ids[first, prompt],
        use_cache=True,
        logits_to_keep=1,
    )
    cache = prompt_out.past_key_values
    cache.batch_select_indices(inverse)  # differentiable gather: each row's gradient flows back to its prompt
    response_out = model(
        input_ids=input_ids[:, prompt_width:],
        attention_mask=attention_mask,
        position_ids=position_ids[:, prompt_width:],
        past_key_values=cache,
        use_cache=True,
    )
    # The first response token is predicted by the prompt's last position, token j > 0 by response position j - 1.
    return torch.cat([prompt_out.logits[inverse], response_out.logits[:, :-1]], dim=1)


def response_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    prompt_width: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prompts: bool = False,
    pack: bool = False,
    sequence_group: Optional[dist.ProcessGroup] = None,
    bucket_length: bool = False,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Log-probs [B, R] of the response tokens (columns `prompt_width:`) under `log_softmax(logits / temperature)`,
    and optionally the entropy [B, R] of that distribution. Padding columns hold meaningless values: mask them.

    `share_prompts=True` runs each distinct prompt once when rows repeat prompts (`shared_prompts`); the model must
    accept `past_key_values`, `use_cache` and `logits_to_keep` as Hugging Face causal LMs do, and must not use
    gradient checkpointing (which turns the cache off).

    `pack=True` runs the rows as one packed sequence without padding (`models.packing`; the model must have been
    switched with `enable_packed_attention`); there `share_prompts` packs each distinct prompt once, whatever the
    share of repeated prompts and with or without gradient checkpointing. Padding columns then hold 0.

    `sequence_group` (with `pack`): every rank of that process group passes the same rows and runs the model on its
    slice of the packed sequence (`models.ulysses`); each gets the whole result.

    `bucket_length` (with `pack`) rounds the packed length up with filler tokens (`models.packing.bucketed_length`)."""
    if sequence_group is not None and not pack:
        raise ValueError("response_logprobs: a sequence_group splits a packed sequence; pass pack=True")
    if pack:
        packed = pack_rows(
            input_ids,
            attention_mask,
            position_ids,
            prompt_width,
            share_prompts=share_prompts,
            bucket_length=bucket_length,
        )
        if sequence_group is not None:
            return sharded_response_logprobs(model, packed, sequence_group, temperature, with_entropy)
        return packed_response_logprobs(model, packed, temperature=temperature, with_entropy=with_entropy)
    if temperature <= 0:
        temperature = 1.0  # greedy rollouts: the engine reports unscaled logprobs
    response_width = input_ids.shape[1] - prompt_width
    groups = shared_prompts(input_ids, attention_mask, position_ids, prompt_width) if share_prompts else None
    if groups is not None:
        logits = _response_logits_shared(model, input_ids, attention_mask, position_ids, prompt_width, *groups)
    else:
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).logits
        logits = logits[:, prompt_width - 1 : prompt_width - 1 + response_width, :]
    shifted = logits.float() / temperature
    targets = input_ids[:, prompt_width:]
    logprobs = torch.log_softmax(shifted, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = entropy_from_logits(shifted) if with_entropy else None
    return logprobs, entropy
