"""Entropy from logits (masked, chunked, -inf safe) and the entropy bonus."""

import math

import pytest
import torch

from skyrl_train.algorithms import entropy_bonus, entropy_from_logits

NAN, INF = float("nan"), float("inf")


def test_entropy_values_by_hand():
    logits = torch.tensor(
        [
            [[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), -INF, -INF]],  # uniform over 4 ; probs [1/4, 3/4]
            [[5.0, -INF, 5.0, -INF], [NAN, NAN, NAN, NAN]],  # uniform over 2 ; a masked position
        ]
    )
    mask = torch.tensor([[1, 1], [1, 0]])
    # ln 4 = 1.386294 ; -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.562335 ; ln 2 = 0.693147
    expected = torch.tensor([[1.386294, 0.562335], [0.693147, 0.0]])
    assert torch.allclose(entropy_from_logits(logits, mask), expected, atol=1e-5)
    assert torch.allclose(entropy_from_logits(logits, mask, chunk_size=1), expected, atol=1e-5)


def test_gradient_is_finite_with_minus_inf_logits():
    logits = torch.tensor([[[0.0, -INF, 0.0]]], requires_grad=True)
    entropy_from_logits(logits).sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_chunked_gradient_matches_unchunked():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    grads = []
    for chunk in (None, 2):
        leaf = logits.clone().requires_grad_(True)
        entropy_from_logits(leaf, chunk_size=chunk).sum().backward()
        grads.append(leaf.grad)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_entropy_bonus_is_minus_coef_times_reduced_entropy():
    entropy = torch.tensor([[1.0, 2.0, 9.0]])
    term, mean_entropy = entropy_bonus(entropy, torch.tensor([[1, 1, 0]]), coef=0.01)
    assert term.item() == pytest.approx(-0.015)  # -0.01 * (1 + 2) / 2
    assert mean_entropy.item() == pytest.approx(1.5)


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match=r"logits must be \[batch, seq_len, vocab\]"):
        entropy_from_logits(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        entropy_from_logits(torch.zeros(1, 1, 2), chunk_size=0)
