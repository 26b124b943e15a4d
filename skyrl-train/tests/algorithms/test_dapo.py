"""DAPO helpers: zero-variance groups, the dynamic sampling buffer, overlong filtering and soft punishment."""

import pytest
import torch

from skyrl_train.algorithms import (
    DynamicSamplingBuffer,
    DynamicSamplingExhaustedError,
    overlong_filter,
    soft_overlong_punishment,
    zero_variance_group_mask,
)


def test_zero_variance_groups_include_singletons():
    # a = [1, 1] (no variance), b = [0, 1], c = [0.5] (singleton)
    mask = zero_variance_group_mask([1.0, 1.0, 0.0, 1.0, 0.5], ["a", "a", "b", "b", "c"])
    assert mask.tolist() == [True, True, False, False, True]
    within_tol = zero_variance_group_mask(torch.tensor([1.0, 1.0 + 1e-8]), torch.tensor([3, 3]))
    assert within_tol.tolist() == [True, True]


def test_buffer_collects_informative_groups_across_rounds():
    buffer = DynamicSamplingBuffer(target_num_groups=2, max_rounds=3)
    # round 1: group 0 all-correct (dropped), group 1 mixed (kept)
    assert buffer.add(["a1", "a2", "b1", "b2"], [1.0, 1.0, 0.0, 1.0], [0, 0, 1, 1]) is False
    assert (buffer.num_groups, buffer.rounds) == (1, 1)
    # round 2: groups c and d both mixed -> 3 kept >= 2 (d is surplus)
    assert buffer.add(["c1", "d1", "c2", "d2"], [0.0, 1.0, 1.0, 0.0], ["c", "d", "c", "d"]) is True
    result = buffer.pop()
    assert result.samples == ["b1", "b2", "c1", "c2"]
    assert result.group_sizes == [2, 2]
    assert (result.rounds, result.complete) == (2, True)
    assert (buffer.num_groups, buffer.rounds) == (0, 0)


def test_buffer_raises_after_max_rounds():
    buffer = DynamicSamplingBuffer(target_num_groups=2, max_rounds=2)
    buffer.add(["x", "y"], [1.0, 1.0], [0, 0])
    with pytest.raises(DynamicSamplingExhaustedError, match="kept 0 of target_num_groups=2 .* max_rounds=2"):
        buffer.add(["x", "y"], [0.0, 0.0], [0, 0])


def test_buffer_returns_partial_when_asked():
    buffer = DynamicSamplingBuffer(target_num_groups=2, max_rounds=2, return_partial=True)
    assert buffer.add(["x", "y"], [1.0, 0.0], [0, 0]) is False
    assert buffer.add(["z", "w"], [1.0, 1.0], [0, 0]) is True
    result = buffer.pop()
    assert (result.samples, result.group_sizes, result.complete) == (["x", "y"], [2], False)
    with pytest.raises(RuntimeError, match="not ready"):
        buffer.pop()


def test_overlong_filter_zeroes_truncated_rows():
    loss_mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    by_reason = overlong_filter(loss_mask, stop_reasons=["stop", "length", "stop"])
    assert by_reason.tolist() == [[1, 1, 0], [0, 0, 0], [1, 0, 0]]
    by_length = overlong_filter(loss_mask, response_lengths=[2, 3, 1], max_response_len=3)
    assert by_length.tolist() == [[1, 1, 0], [0, 0, 0], [1, 0, 0]]
    with pytest.raises(ValueError, match="needs max_response_len"):
        overlong_filter(loss_mask, response_lengths=[2, 3, 1])


def test_soft_overlong_punishment_is_dapos_linear_ramp():
    # L_max 10, L_cache 4: free up to 6, then (6 - L) / 4, and -1 beyond 10
    penalty = soft_overlong_punishment([5, 6, 7, 9, 10, 11], max_response_len=10, buffer_len=4)
    assert torch.allclose(penalty, torch.tensor([0.0, 0.0, -0.25, -0.75, -1.0, -1.0]))
    halved = soft_overlong_punishment([8], max_response_len=10, buffer_len=4, penalty_factor=0.5)
    assert halved.item() == pytest.approx(-0.25)  # 0.5 * (6 - 8) / 4
    with pytest.raises(ValueError, match="buffer_len must be in"):
        soft_overlong_punishment([1], max_response_len=10, buffer_len=0)
