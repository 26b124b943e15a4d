"""Pure next-token sampling on a batch of logits: temperature, top-k, top-p, min-p, and the sampled logprobs."""

from __future__ import annotations

from typing import Optional

import torch

from skyrl_train.inference.types import SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int = -1, top_p: float = 1.0, min_p: float = 0.0) -> torch.Tensor:
    """Set to -inf every logit outside the top-k, outside the smallest top-p nucleus, or below min_p * max prob.

    `logits` is [batch, vocab] (already temperature-scaled). The most likely token always survives.
    """
    filtered = logits
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(filtered, top_k, dim=-1).values[:, -1:]
        filtered = filtered.masked_fill(filtered < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(filtered, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs  # probability mass strictly ahead of each token
        drop_sorted = mass_before >= top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        filtered = filtered.masked_fill(drop, float("-inf"))
    if min_p > 0.0:
        probs = torch.softmax(filtered, dim=-1)
        threshold = min_p * probs.max(dim=-1, keepdim=True).values
        filtered = filtered.masked_fill(probs < threshold, float("-inf"))
    return filtered


def sample_next_tokens(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: Optional[torch.Generator | list[Optional[torch.Generator]]] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of `logits` [batch, vocab]; return (token ids [batch], their logprobs [batch]).

    Greedy when temperature is 0. The logprob is under `log_softmax(logits / temperature)` (temperature 1 for greedy)
    before filtering, matching what the trainer recomputes. `generator` is one generator for the batch, or one per
    row (so a seeded row samples the same tokens whatever batch it is in).
    """
    logits = logits.float()
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
        scaled = logits
    else:
        scaled = logits / params.temperature
        filtered = filter_logits(scaled, params.top_k, params.top_p, params.min_p)
        probs = torch.softmax(filtered, dim=-1)
        if isinstance(generator, list):
            tokens = torch.cat([torch.multinomial(probs[i : i + 1], 1, generator=g) for i, g in enumerate(generator)])
            tokens = tokens.squeeze(-1)
        else:
            tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    logprobs = torch.log_softmax(scaled, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return tokens, logprobs
