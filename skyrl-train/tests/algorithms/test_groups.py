"""Group ids from tensors or hashables, and per-group statistics via segment ops."""

import pytest
import torch

from skyrl_train.algorithms import group_ids, group_stats


def test_hashable_ids_are_numbered_by_first_appearance():
    gids, count = group_ids(["q2", "q1", "q2", ("t", 1)], 4)
    assert torch.equal(gids, torch.tensor([0, 1, 0, 2])) and count == 3


def test_tensor_ids_are_numbered_in_sorted_order():
    gids, count = group_ids(torch.tensor([30, 10, 30, 20]), 4)
    assert torch.equal(gids, torch.tensor([2, 0, 2, 1])) and count == 3


def test_invalid_index_is_rejected_with_the_problem_named():
    with pytest.raises(ValueError, match="index has 2 entries but the batch has 3"):
        group_ids([0, 1], 3)
    with pytest.raises(ValueError, match="1-D integer tensor"):
        group_ids(torch.tensor([0.0, 1.0]), 2)
    with pytest.raises(ValueError, match="sequence of hashables"):
        group_ids("ab", 2)


def test_group_stats_count_mean_sample_std_min_max():
    values = torch.tensor([1.0, 3.0, 5.0, 2.0])
    stats = group_stats(values, torch.tensor([0, 0, 1, 0]), 2)
    # group 0 = [1, 3, 2]: mean 2, sample std sqrt((1 + 1 + 0) / 2) = 1 ; group 1 = [5]: std 0
    assert torch.equal(stats.count, torch.tensor([3.0, 1.0]))
    assert torch.allclose(stats.mean, torch.tensor([2.0, 5.0]))
    assert torch.allclose(stats.std, torch.tensor([1.0, 0.0]))
    assert torch.equal(stats.minimum, torch.tensor([1.0, 5.0]))
    assert torch.equal(stats.maximum, torch.tensor([3.0, 5.0]))
