"""The critic's clipped value loss."""

from __future__ import annotations

from typing import Optional

import torch

from skyrl_train.algorithms.masked import masked_mean, zero_masked
from skyrl_train.algorithms.reductions import reduce_loss


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    loss_mask: torch.Tensor,
    value_clip: Optional[float] = 0.2,
    loss_reduction: str = "token_mean",
    max_seq_len: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss 0.5 * max((V - R)^2, (V_clip - R)^2), V_clip = V_old + clamp(V - V_old, -c, c).

    Returns (reduced loss, clip_frac): clip_frac is the fraction of valid tokens where the clipped term is strictly
    larger (so it carries the gradient). `value_clip=None` gives the unclipped 0.5 * (V - R)^2 and clip_frac 0.
    """
    for name, tensor in (("values", values), ("old_values", old_values), ("returns", returns)):
        if tensor.shape != loss_mask.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected loss_mask's {tuple(loss_mask.shape)}")
    if value_clip is not None and value_clip < 0:
        raise ValueError(f"value_clip must be >= 0 or None, got {value_clip}")
    v = zero_masked(values.float(), loss_mask)
    target = zero_masked(returns.detach().float(), loss_mask)
    unclipped = (v - target) ** 2
    if value_clip is None:
        per_token, clipped_more = unclipped, torch.zeros_like(unclipped)
    else:
        old = zero_masked(old_values.detach().float(), loss_mask)
        v_clipped = old + (v - old).clamp(-value_clip, value_clip)
        clipped = (v_clipped - target) ** 2
        per_token = torch.maximum(unclipped, clipped)
        clipped_more = (clipped > unclipped).float()
    loss = reduce_loss(loss_reduction, 0.5 * per_token, loss_mask, max_seq_len=max_seq_len)
    return loss, masked_mean(clipped_more, loss_mask).detach()
