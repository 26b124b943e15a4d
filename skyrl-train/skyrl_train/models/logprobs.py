"""Per-token log-probabilities (and entropy) of response tokens under a causal LM, as the trainer computes them."""

from __future__ import annotations

from typing import Optional

import torch

from skyrl_train.algorithms.entropy import entropy_from_logits


def response_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    prompt_width: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Log-probs [B, R] of the response tokens (columns `prompt_width:`) under `log_softmax(logits / temperature)`,
    and optionally the entropy [B, R] of that distribution. Padding columns hold meaningless values: mask them."""
    if temperature <= 0:
        temperature = 1.0  # greedy rollouts: the engine reports unscaled logprobs
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).logits
    response_width = input_ids.shape[1] - prompt_width
    shifted = logits[:, prompt_width - 1 : prompt_width - 1 + response_width, :].float() / temperature
    targets = input_ids[:, prompt_width:]
    logprobs = torch.log_softmax(shifted, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = entropy_from_logits(shifted) if with_entropy else None
    return logprobs, entropy
