"""Pure next-token sampling on a batch of logits: repetition penalty, temperature, top-k, top-p, min-p, and the
sampled (and top-k) logprobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import numpy as np
import torch

from skyrl_train.inference.types import SamplingParams


def apply_repetition_penalty(logits: torch.Tensor, seen: Optional[torch.Tensor], penalty: float) -> torch.Tensor:
    """Penalise tokens already present: where `seen` [batch, vocab] is true, a positive logit is divided by
    `penalty` and a negative one multiplied by it (CTRL's rule, as in transformers and vLLM); 1.0 changes nothing.

    `seen` marks every token of the prompt and of the response so far (a token counts once however often it occurs).
    """
    if penalty == 1.0 or seen is None:
        return logits
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def scaled_logits(logits: torch.Tensor, params: SamplingParams, seen: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The logits the engine samples from and reports logprobs under: repetition penalty, then `/ temperature`
    (temperature 1 for greedy). float32."""
    penalised = apply_repetition_penalty(logits.float(), seen, params.repetition_penalty)
    return penalised if params.temperature == 0 else penalised / params.temperature


def top_logprobs(
    logits: torch.Tensor, params: SamplingParams, k: int, seen: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The `k` most likely next tokens of each row: (logprobs [batch, k], token ids [batch, k]), most likely first,
    under the same distribution as the sampled logprob (`log_softmax(scaled_logits)`, before top-k/top-p/min-p)."""
    logprobs = torch.log_softmax(scaled_logits(logits, params, seen), dim=-1)
    return torch.topk(logprobs, min(k, logprobs.shape[-1]), dim=-1)


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
    seen: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of `logits` [batch, vocab]; return (token ids [batch], their logprobs [batch]).

    Greedy when temperature is 0. The logprob is under `log_softmax(logits / temperature)` (temperature 1 for greedy)
    before filtering, matching what the trainer recomputes. With `params.repetition_penalty` != 1, the tokens marked
    in `seen` [batch, vocab] are penalised first (`apply_repetition_penalty`), and the logprob is under the penalised
    distribution, the one the token was drawn from. Randomness comes from `uniforms` [batch] in [0, 1) when
    given (inverse-CDF sampling: a row's token depends only on its own number, so rows seeded on their own sample the
    same tokens whatever batch they are in, in one vectorised call), else from `generator`: one for the batch, or
    one per row (one `multinomial` call per row: slow for large batches).
    """
    scaled = scaled_logits(logits, params, seen)
    if params.temperature == 0:
        tokens = scaled.argmax(dim=-1)
    else:
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


_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_UINT64_MASK = (1 << 64) - 1


def _splitmix64_finalize(state: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on uint64 `state` (wrapping arithmetic): a bijection that mixes every bit."""
    state = (state ^ (state >> np.uint64(30))) * _MIX_1
    state = (state ^ (state >> np.uint64(27))) * _MIX_2
    return state ^ (state >> np.uint64(31))


def seeded_uniforms(seeds: Sequence[int], width: int) -> torch.Tensor:
    """Uniform numbers in [0, 1), float32 [len(seeds), width]: row r is the SplitMix64 stream of `seeds[r]`, so a
    row's numbers depend on its seed and position alone (not on the rows drawn with it, nor on `width`).

    Counter-based, so one vectorised call replaces a re-seeded generator per row: number t of a row is the finalized
    state `key + (t + 1) * gamma`, with `key` the finalized seed (neighbouring seeds, such as the samples of one
    prompt, get unrelated streams). The top 24 bits make the float, exactly representable in float32."""
    keys = np.array([seed & _UINT64_MASK for seed in seeds], dtype=np.uint64)
    keys = _splitmix64_finalize(keys)
    counters = np.arange(1, width + 1, dtype=np.uint64) * _GOLDEN_GAMMA
    bits = _splitmix64_finalize(keys[:, None] + counters[None, :])
    return torch.from_numpy((bits >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24))
