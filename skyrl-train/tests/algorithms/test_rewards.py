"""Scalar rewards placed on the last valid token; per-sequence scores; masked returns-to-go."""

import pytest
import torch

from skyrl_train.algorithms import discounted_returns, scalar_rewards_to_token_level, sequence_scores
from skyrl_train.algorithms.rewards import last_token_index


def test_scalar_reward_lands_on_the_last_valid_token():
    mask = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 0, 0]])
    assert torch.equal(last_token_index(mask), torch.tensor([1, 2, -1]))
    token_rewards = scalar_rewards_to_token_level([0.5, 2.0, 9.0], mask)
    # the all-masked row has nowhere to put its reward
    assert torch.equal(token_rewards, torch.tensor([[0.0, 0.5, 0.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="one entry per sample"):
        scalar_rewards_to_token_level([1.0, 2.0], mask)


def test_sequence_scores_sum_valid_tokens():
    rewards = torch.tensor([[0.25, 0.5, 100.0], [1.0, -1.0, 2.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert torch.equal(sequence_scores(rewards, mask), torch.tensor([0.75, 2.0]))


def test_returns_to_go_skip_masked_tokens_when_discounting():
    rewards = torch.tensor([[1.0, 5.0, 2.0], [0.0, 0.0, 4.0]])
    mask = torch.tensor([[1, 0, 1], [1, 1, 1]])
    # row 0: t2 = 2 ; t0 = 1 + 0.5 * 2 = 2 (the masked t1 is neither a reward nor a step)
    # row 1: t2 = 4 ; t1 = 2 ; t0 = 1
    assert torch.equal(discounted_returns(rewards, mask, 0.5), torch.tensor([[2.0, 0.0, 2.0], [1.0, 2.0, 4.0]]))
    # gamma 1: reversed cumulative sums of valid rewards
    assert torch.equal(discounted_returns(rewards, mask, 1.0), torch.tensor([[3.0, 0.0, 2.0], [4.0, 4.0, 4.0]]))
