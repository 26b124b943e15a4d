"""DAPO helpers: zero-variance groups and soft overlong punishment."""

import pytest
import torch

from skyrl_train.algorithms import soft_overlong_punishment, zero_variance_group_mask


def test_zero_variance_groups_include_singletons():
    # a = [1, 1] (no variance), b = [0, 1], c = [0.5] (singleton)
    mask = zero_variance_group_mask([1.0, 1.0, 0.0, 1.0, 0.5], ["a", "a", "b", "b", "c"])
    assert mask.tolist() == [True, True, False, False, True]
    within_tol = zero_variance_group_mask(torch.tensor([1.0, 1.0 + 1e-8]), torch.tensor([3, 3]))
    assert within_tol.tolist() == [True, True]


def test_soft_overlong_punishment_is_dapos_linear_ramp():
    # L_max 10, L_cache 4: free up to 6, then (6 - L) / 4, and -1 beyond 10
    penalty = soft_overlong_punishment([5, 6, 7, 9, 10, 11], max_response_len=10, buffer_len=4)
    assert torch.allclose(penalty, torch.tensor([0.0, 0.0, -0.25, -0.75, -1.0, -1.0]))
    halved = soft_overlong_punishment([8], max_response_len=10, buffer_len=4, penalty_factor=0.5)
    assert halved.item() == pytest.approx(-0.25)  # 0.5 * (6 - 8) / 4
    with pytest.raises(ValueError, match="buffer_len must be in"):
        soft_overlong_punishment([1], max_response_len=10, buffer_len=0)
