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
    uniforms: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of `logits` [batch, vocab]; return (token ids [batch], their logprobs [batch]).

    Greedy when temperature is 0. The logprob is under `log_softmax(logits / temperature)` (temperature 1 for greedy)
    before filtering, matching what the trainer recomputes. Randomness comes from `uniforms` [batch] in [0, 1) when
    given (inverse-CDF sampling: a row's token depends only on its own number, so rows seeded on their own sample the
    same tokens whatever batch they are in, in one vectorised call), else from `generator`: one for the batch, or
    one per row (one `multinomial` call per row: slow for large batches).
    """
    logits = logits.float()
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
        scaled = logits
    else:
        scaled = logits / params.temperature
        filtered = filter_logits(scaled, params.top_k, params.top_p, params.min_p)
        probs = torch.softmax(filtered, dim=-1)
        if uniforms is not None:
            tokens = inverse_cdf_sample(probs, uniforms)
        elif isinstance(generator, list):
            tokens = torch.cat([torch.multinomial(probs[i : i + 1], 1, generator=g) for i, g in enumerate(generator)])
            tokens = tokens.squeeze(-1)
        else:
            tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    logprobs = torch.log_softmax(scaled, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return tokens, logprobs


def inverse_cdf_sample(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Token ids [batch]: for each row the first token whose cumulative probability exceeds `uniforms[row]` times the
    row's total (so rounding in the sum never matters, and zero-probability tokens are never picked)."""
    cumulative = probs.double().cumsum(dim=-1)
    targets = uniforms.to(cumulative.dtype).unsqueeze(-1) * cumulative[:, -1:]
    tokens = torch.searchsorted(cumulative, targets, right=True).squeeze(-1)
    return tokens.clamp(max=probs.shape[-1] - 1)
