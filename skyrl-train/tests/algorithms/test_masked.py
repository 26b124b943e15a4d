"""Masked statistics ignore masked-out positions, including NaN and inf there."""

import torch

from skyrl_train.algorithms import masked_mean, masked_sum, masked_var, masked_whiten, safe_exp, zero_masked
from skyrl_train.algorithms.masked import masked_min_max

NAN, INF = float("nan"), float("inf")

VALUES = torch.tensor([[1.0, 2.0, NAN], [3.0, INF, -INF]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


def test_sum_mean_var_over_valid_positions_only():
    assert masked_sum(VALUES, MASK).item() == 6.0
    assert masked_mean(VALUES, MASK).item() == 2.0  # (1 + 2 + 3) / 3
    assert torch.equal(masked_mean(VALUES, MASK, dim=-1), torch.tensor([1.5, 3.0]))
    # population var of [1, 2, 3] = 2/3 ; sample var = 1
    assert abs(masked_var(VALUES, MASK).item() - 2 / 3) < 1e-6
    assert abs(masked_var(VALUES, MASK, unbiased=True).item() - 1.0) < 1e-6


def test_empty_mask_gives_zero_not_nan():
    empty = torch.zeros(2, 3)
    assert masked_mean(VALUES, empty).item() == 0.0
    low, high = masked_min_max(VALUES, empty)
    assert (low.item(), high.item()) == (0.0, 0.0)


def test_whiten_standardises_valid_positions_and_zeroes_the_rest():
    # [1, 2, 3]: mean 2, population std sqrt(2/3) = 0.816497 -> [-1.224745, 0, 1.224745]
    white = masked_whiten(VALUES, MASK)
    assert torch.allclose(white, torch.tensor([[-1.224745, 0.0, 0.0], [1.224745, 0.0, 0.0]]), atol=1e-5)
    kept_mean = masked_whiten(VALUES, MASK, shift_mean=False)
    assert torch.allclose(kept_mean, torch.tensor([[0.775255, 2.0, 0.0], [3.224745, 0.0, 0.0]]), atol=1e-5)


def test_min_max_and_zero_masked():
    low, high = masked_min_max(VALUES, MASK)
    assert (low.item(), high.item()) == (1.0, 3.0)
    assert torch.equal(zero_masked(VALUES, MASK), torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]]))


def test_gradient_is_zero_on_masked_positions_even_when_they_hold_nan():
    values = VALUES.clone().requires_grad_(True)
    masked_mean(values, MASK).backward()
    assert torch.equal(values.grad, torch.tensor([[1 / 3, 1 / 3, 0.0], [1 / 3, 0.0, 0.0]]))


def test_safe_exp_clamps_the_log_ratio_at_20():
    out = safe_exp(torch.tensor([0.0, 100.0, -100.0]))
    assert out[0].item() == 1.0
    assert torch.allclose(out[1:], torch.tensor([4.851652e8, 2.0611536e-9]), rtol=1e-5)
