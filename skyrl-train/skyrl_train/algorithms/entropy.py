"""Per-token entropy of the policy's next-token distribution from logits, and the entropy-bonus loss term.

H = logsumexp(z) - sum_v softmax(z)_v * z_v, computed in float32. Logits of -inf (banned tokens) are allowed: their
probability is 0 and they contribute nothing, without NaN in the value or the gradient. Pass logits already divided
by the sampling temperature if the entropy should describe the sampling distribution.
"""

from __future__ import annotations

from typing import Optional

import torch

from skyrl_train.algorithms.masked import masked_mean
from skyrl_train.algorithms.reductions import reduce_loss


def _entropy_rows(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each row of a [N, V] logits tensor."""
    z = logits.float()
    log_norm = torch.logsumexp(z, dim=-1)
    probs = torch.softmax(z, dim=-1)
    finite_z = torch.where(torch.isinf(z), torch.zeros_like(z), z)
    return log_norm - (probs * finite_z).sum(dim=-1)


def entropy_from_logits(
    logits: torch.Tensor, mask: Optional[torch.Tensor] = None, chunk_size: Optional[int] = None
) -> torch.Tensor:
    """Entropy per position: logits [B, T, V] -> [B, T] (float32).

    With `mask` [B, T], only masked-in positions are computed (others are 0). With `chunk_size`, at most that many
    positions are processed at once, bounding the float32 temporaries to chunk_size x V (gradients still flow).
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be [batch, seq_len, vocab], got shape {tuple(logits.shape)}")
    if chunk_size is not None and chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size}")
    batch, length, vocab = logits.shape
    if mask is None:
        keep = torch.ones(batch, length, dtype=torch.bool, device=logits.device)
    else:
        if mask.shape != (batch, length):
            raise ValueError(f"mask has shape {tuple(mask.shape)}, expected {(batch, length)}")
        keep = mask.bool()
    positions = keep.flatten().nonzero().squeeze(-1)
    flat_logits = logits.reshape(batch * length, vocab)
    step = chunk_size or max(int(positions.numel()), 1)
    pieces = [_entropy_rows(flat_logits[positions[i : i + step]]) for i in range(0, positions.numel(), step)]
    values = torch.cat(pieces) if pieces else torch.zeros(0, device=logits.device)
    entropy = torch.zeros(batch * length, dtype=torch.float32, device=logits.device)
    return entropy.index_put((positions,), values).view(batch, length)


def entropy_bonus(
    entropy: torch.Tensor,
    loss_mask: torch.Tensor,
    coef: float,
    loss_reduction: str = "token_mean",
    max_seq_len: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss term rewarding entropy: (-coef * reduced entropy, mean entropy per valid token for logging).

    Add the first element to the policy loss; minimising it raises the entropy.
    """
    reduced = reduce_loss(loss_reduction, entropy, loss_mask, max_seq_len=max_seq_len)
    return -coef * reduced, masked_mean(entropy.detach(), loss_mask)
