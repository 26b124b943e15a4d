"""Masked tensor statistics (sum, mean, variance, whitening) and the clamped exp used for probability ratios.

Every function reads `values` only where `mask` is nonzero: masked positions may hold any value, even NaN or inf,
without changing the result (they are replaced by zero with `torch.where` before any arithmetic, which also keeps
their gradient at exactly zero).
"""

from __future__ import annotations

from typing import Optional

import torch

LOG_RATIO_CLAMP = 20.0
"""Log-ratios are clamped to [-20, 20] before `exp`, so a ratio stays within about [2e-9, 4.9e8] and never overflows."""


def _check_same_shape(values: torch.Tensor, mask: torch.Tensor, what: str = "values") -> None:
    if values.shape != mask.shape:
        raise ValueError(
            f"{what} has shape {tuple(values.shape)} but mask has shape {tuple(mask.shape)}; expected equal"
        )


def zero_masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`values` where `mask` is nonzero, 0 elsewhere (NaN/inf at masked positions do not leak)."""
    _check_same_shape(values, mask)
    return torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Sum of `values` over positions where `mask` is nonzero (over all positions, or along `dim`)."""
    kept = zero_masked(values, mask) * mask.to(values.dtype)
    return kept.sum() if dim is None else kept.sum(dim)


def masked_count(mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Number of nonzero mask entries (a float tensor), overall or along `dim`."""
    m = (mask != 0).float()
    return m.sum() if dim is None else m.sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Mean of `values` over masked-in positions; 0 where no position is masked in (instead of NaN)."""
    total = masked_sum(values, mask, dim)
    count = masked_count(mask, dim).to(total.dtype)
    return total / count.clamp(min=1.0)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = False) -> torch.Tensor:
    """Variance over all masked-in positions; population variance (divide by n) unless `unbiased` (n - 1)."""
    mean = masked_mean(values, mask)
    sq_dev = masked_sum((values - mean) ** 2, mask)
    count = masked_count(mask).to(sq_dev.dtype)
    denom = (count - 1.0) if unbiased else count
    return sq_dev / denom.clamp(min=1.0)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """Standardise over the masked-in positions: (x - mean) / sqrt(var + eps), population variance, 0 on masked-out.

    With `shift_mean=False` the mean is added back, so only the scale changes.
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return zero_masked(whitened, mask)


def safe_exp(log_values: torch.Tensor, clamp: float = LOG_RATIO_CLAMP) -> torch.Tensor:
    """`exp(clamp(log_values, -clamp, clamp))`: a probability ratio from a log-ratio that cannot overflow."""
    return torch.exp(log_values.clamp(min=-clamp, max=clamp))


def masked_min_max(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(min, max) over masked-in positions; (0, 0) when nothing is masked in."""
    keep = mask.bool()
    any_kept = keep.any()
    inf = torch.tensor(float("inf"), dtype=values.dtype, device=values.device)
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    low = torch.where(any_kept, torch.where(keep, values, inf).min(), zero)
    high = torch.where(any_kept, torch.where(keep, values, -inf).max(), zero)
    return low, high
