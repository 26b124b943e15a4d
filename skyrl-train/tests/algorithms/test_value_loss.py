"""Clipped value loss and its clip fraction, by hand."""

import pytest
import torch

from skyrl_train.algorithms import value_loss

NAN = float("nan")
# four valid tokens and one padding token
VALUES = [[1.0, 2.0, 0.0], [1.0, NAN, NAN]]
OLD = [[0.5, 2.0, 0.0], [0.5, NAN, NAN]]
RETURNS = [[2.0, 1.0, 0.1], [0.6, NAN, NAN]]
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


def test_clipped_value_loss_takes_the_larger_error():
    values = torch.tensor(VALUES, requires_grad=True)
    loss, clip_frac = value_loss(values, torch.tensor(OLD), torch.tensor(RETURNS), MASK, value_clip=0.2)
    # V_clip = old + clamp(V - old, -0.2, 0.2)
    #   t1: V 1, old .5 -> V_clip .7, R 2: (1-2)^2 = 1, (.7-2)^2 = 1.69 -> 1.69 (clipped is larger)
    #   t2: V = old = 2, R 1: 1 ; t3: V = old = 0, R .1: 0.01
    #   t4: V 1, old .5 -> V_clip .7, R .6: (1-.6)^2 = .16, (.7-.6)^2 = .01 -> .16
    # 0.5 * (1.69 + 1 + 0.01 + 0.16) / 4 = 0.3575
    assert loss.item() == pytest.approx(0.3575, abs=1e-6)
    assert clip_frac.item() == pytest.approx(0.25)
    loss.backward()
    # t1 sits on the clipped branch (V_clip is constant in V): no gradient
    # others: 0.5 * 2 (V - R) / 4 -> t2: 0.25, t3: -0.025, t4: 0.1
    assert torch.allclose(values.grad, torch.tensor([[0.0, 0.25, -0.025], [0.1, 0.0, 0.0]]), atol=1e-6)


def test_unclipped_value_loss():
    loss, clip_frac = value_loss(torch.tensor(VALUES), torch.tensor(OLD), torch.tensor(RETURNS), MASK, value_clip=None)
    # 0.5 * (1 + 1 + 0.01 + 0.16) / 4 = 0.27125
    assert loss.item() == pytest.approx(0.27125, abs=1e-6)
    assert clip_frac.item() == 0.0
    with pytest.raises(ValueError, match="value_clip must be >= 0"):
        value_loss(torch.tensor(VALUES), torch.tensor(OLD), torch.tensor(RETURNS), MASK, value_clip=-1.0)
