"""Loss reductions: turn a per-token loss [B, T] and its mask into one scalar (token_mean, sequence_mean, ...).

Every reduction has the signature

    reduction(values: Tensor[B, T], mask: Tensor[B, T], *, max_seq_len: int | None = None,
              denominator: float | Tensor | None = None) -> Tensor[]

`denominator` overrides what the reduction divides by (valid tokens for token_mean, sequences for the sequence
reductions). Pass the count of the whole mini-batch when this batch is one micro-batch of it, so that summing the
micro-batch losses gives exactly the mini-batch loss. Masked-out positions never change the result.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from skyrl_train.algorithms.masked import masked_count, masked_sum
from skyrl_train.algorithms.registry import LOSS_REDUCTIONS

Denominator = Optional[Union[float, torch.Tensor]]


def _check(values: torch.Tensor, mask: torch.Tensor) -> None:
    if values.dim() != 2 or values.shape != mask.shape:
        raise ValueError(
            f"loss values {tuple(values.shape)} and mask {tuple(mask.shape)} must both be [batch, response_len]"
        )


def _divide(total: torch.Tensor, default_count: torch.Tensor, denominator: Denominator) -> torch.Tensor:
    count = default_count if denominator is None else torch.as_tensor(denominator, dtype=total.dtype)
    return total / torch.clamp(count.to(device=total.device, dtype=total.dtype), min=1.0)


@LOSS_REDUCTIONS.register("token_mean", builtin=True)
def token_mean(
    values: torch.Tensor, mask: torch.Tensor, *, max_seq_len: Optional[int] = None, denominator: Denominator = None
) -> torch.Tensor:
    """Sum over all valid tokens of the batch divided by their number (long sequences weigh more)."""
    _check(values, mask)
    return _divide(masked_sum(values, mask), masked_count(mask), denominator)


@LOSS_REDUCTIONS.register("sequence_mean", builtin=True)
def sequence_mean(
    values: torch.Tensor, mask: torch.Tensor, *, max_seq_len: Optional[int] = None, denominator: Denominator = None
) -> torch.Tensor:
    """Mean over valid tokens within each sequence, then mean over the sequences that have a valid token."""
    _check(values, mask)
    per_token_count = masked_count(mask, dim=-1)
    per_sequence = masked_sum(values, mask, dim=-1) / per_token_count.clamp(min=1.0).to(values.dtype)
    return _divide(per_sequence.sum(), (per_token_count > 0).sum(), denominator)


@LOSS_REDUCTIONS.register("seq_mean_token_sum_norm", builtin=True)
def seq_mean_token_sum_norm(
    values: torch.Tensor, mask: torch.Tensor, *, max_seq_len: Optional[int] = None, denominator: Denominator = None
) -> torch.Tensor:
    """Dr. GRPO: each sequence's token sum divided by the fixed `max_seq_len`, then the mean over all B sequences."""
    _check(values, mask)
    if max_seq_len is None or max_seq_len <= 0:
        raise ValueError(
            "loss reduction 'seq_mean_token_sum_norm' needs max_seq_len (a positive int: the maximum response "
            f"length the sums are normalised by), got {max_seq_len!r}"
        )
    per_sequence = masked_sum(values, mask, dim=-1) / float(max_seq_len)
    batch = torch.tensor(float(values.shape[0]), device=values.device)
    return _divide(per_sequence.sum(), batch, denominator)


@LOSS_REDUCTIONS.register("token_sum", builtin=True)
def token_sum(
    values: torch.Tensor, mask: torch.Tensor, *, max_seq_len: Optional[int] = None, denominator: Denominator = None
) -> torch.Tensor:
    """Plain sum over valid tokens (Tinker-style losses, where per-token weights carry the normalisation)."""
    _check(values, mask)
    total = masked_sum(values, mask)
    return total if denominator is None else _divide(total, masked_count(mask), denominator)


def reduce_loss(
    name: str,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    max_seq_len: Optional[int] = None,
    denominator: Denominator = None,
) -> torch.Tensor:
    """Apply the loss reduction registered as `name`."""
    return LOSS_REDUCTIONS.get(name)(values, mask, max_seq_len=max_seq_len, denominator=denominator)
