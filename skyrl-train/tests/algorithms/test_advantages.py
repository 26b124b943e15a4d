"""Advantage estimators against hand-computed examples; padding never changes a result."""

import math

import pytest
import torch

from skyrl_train.algorithms import compute_advantages, scalar_rewards_to_token_level

NAN = float("nan")


def outcome(rewards, mask):
    return scalar_rewards_to_token_level(torch.tensor(rewards), torch.tensor(mask))


# Six samples, T = 3: group "a" has rewards [1, 0, 0], group "b" [1, 1], group "c" is the singleton [0.5].
GROUP_MASK = [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1]]
GROUP_REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 0.5]
GROUP_INDEX = ["a", "a", "a", "b", "b", "c"]
MASK = torch.tensor(GROUP_MASK, dtype=torch.float32)


def on_the_groups(estimator, index=GROUP_INDEX, **options):
    """`estimator`'s (advantages, returns) on the six grouped samples above."""
    return compute_advantages(
        estimator,
        token_level_rewards=outcome(GROUP_REWARDS, GROUP_MASK),
        response_mask=MASK,
        index=index,
        **options,
    )


def test_grpo_normalises_by_group_sample_std_and_zeroes_singletons():
    advantages, returns = on_the_groups("grpo")
    # group a: mean 1/3, sample std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3) = 0.577350
    #   (1 - 1/3) / (0.577350 + 1e-6) = 1.154699 ; (0 - 1/3) / (0.577350 + 1e-6) = -0.577349
    # group b: std 0 -> 0 / 1e-6 = 0 ; group c: singleton -> 0
    per_sample = torch.tensor([1.154699, -0.577349, -0.577349, 0.0, 0.0, 0.0])
    assert torch.allclose(advantages, per_sample[:, None] * MASK, atol=1e-5)
    assert torch.equal(returns, advantages)


def test_dr_grpo_skips_the_std_division():
    advantages, _ = on_the_groups("grpo", index=torch.tensor([7, 7, 7, 2, 2, 9]), norm_by_std=False)
    # reward - group mean: a -> 2/3, -1/3, -1/3 ; b -> 0, 0 ; c singleton -> 0
    per_sample = torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0])
    assert torch.allclose(advantages, per_sample[:, None] * MASK, atol=1e-6)


def test_rloo_uses_the_leave_one_out_mean():
    mask = [[1, 1], [1, 0], [1, 1], [1, 1], [1, 1], [1, 0]]
    rewards = [2.0, 0.0, 1.0, 1.0, 1.0, 4.0]
    advantages, _ = compute_advantages(
        "rloo", token_level_rewards=outcome(rewards, mask), response_mask=torch.tensor(mask), index=[0, 0, 0, 1, 1, 2]
    )
    # group 0 [2, 0, 1]: 2 - (0+1)/2 = 1.5 ; 0 - (2+1)/2 = -1.5 ; 1 - (2+0)/2 = 0
    # group 1 [1, 1]: 0, 0 ; group 2 singleton: 0
    expected = torch.tensor([[1.5, 1.5], [-1.5, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    assert torch.allclose(advantages, expected)


def test_maxrl_divides_the_centred_reward_by_the_group_mean():
    advantages, returns = on_the_groups("maxrl")
    # group a [1, 0, 0]: mean 1/3 -> (1 - 1/3) / (1/3 + 1e-6) = 1.999994 ; (0 - 1/3) / (1/3 + 1e-6) = -0.999997
    # group b [1, 1]: mean 1 -> 0 ; group c: singleton -> 0
    per_sample = torch.tensor([1.999994, -0.999997, -0.999997, 0.0, 0.0, 0.0])
    assert torch.allclose(advantages, per_sample[:, None] * MASK, atol=1e-5)
    assert torch.equal(returns, advantages)
    # a group that never succeeds has mean 0: (0 - 0) / 1e-6 = 0, no blow-up
    zeros, _ = compute_advantages(
        "maxrl", token_level_rewards=torch.zeros(2, 2), response_mask=torch.ones(2, 2), index=[0, 0]
    )
    assert torch.equal(zeros, torch.zeros(2, 2))


def test_maxrl_refuses_negative_rewards_by_sample():
    with pytest.raises(ValueError, match=r"'maxrl' needs non-negative \(success\) rewards; sample 1 scored -1.0"):
        compute_advantages(
            "maxrl", token_level_rewards=outcome([1.0, -1.0], [[1], [1]]), response_mask=torch.ones(2, 1), index=[0, 0]
        )


def test_no_op_passes_token_rewards_through():
    rewards = torch.tensor([[0.5, -0.25, 7.0], [1.0, NAN, NAN]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    advantages, returns = compute_advantages("no_op", token_level_rewards=rewards, response_mask=mask)
    assert torch.equal(advantages, torch.tensor([[0.5, -0.25, 0.0], [1.0, 0.0, 0.0]]))
    assert torch.equal(returns, advantages)


def test_gae_skips_masked_tokens_and_returns_advantage_plus_value():
    # row 0: valid tokens at 0, 2, 3 (token 1 is an observation, garbage in reward and value)
    # row 1: right padding after 2 tokens (NaN values on padding)
    rewards = torch.tensor([[0.0, 9.0, 0.0, 1.0], [0.0, 1.0, 5.0, 5.0]])
    values = torch.tensor([[0.5, 99.0, 0.6, 0.7], [0.2, 0.4, NAN, NAN]])
    mask = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0]])
    advantages, returns = compute_advantages(
        "gae", token_level_rewards=rewards, response_mask=mask, values=values, gamma=0.9, lambd=0.8, whiten=False
    )
    # row 0, valid sequence (r, V) = (0, .5), (0, .6), (1, .7); gamma*lambd = 0.72
    #   t3: delta = 1 - 0.7 = 0.3                  A = 0.3
    #   t2: delta = 0.9*0.7 - 0.6 = 0.03            A = 0.03 + 0.72*0.3 = 0.246
    #   t0: delta = 0.9*0.6 - 0.5 = 0.04            A = 0.04 + 0.72*0.246 = 0.21712
    # row 1: t1: delta = 1 - 0.4 = 0.6, A = 0.6 ; t0: delta = 0.9*0.4 - 0.2 = 0.16, A = 0.16 + 0.72*0.6 = 0.592
    expected_adv = torch.tensor([[0.21712, 0.0, 0.246, 0.3], [0.592, 0.6, 0.0, 0.0]])
    assert torch.allclose(advantages, expected_adv, atol=1e-6)
    expected_returns = torch.tensor([[0.71712, 0.0, 0.846, 1.0], [0.792, 1.0, 0.0, 0.0]])
    assert torch.allclose(returns, expected_returns, atol=1e-6)

    whitened, whitened_returns = compute_advantages(
        "gae", token_level_rewards=rewards, response_mask=mask, values=values, gamma=0.9, lambd=0.8
    )
    # valid A = [0.21712, 0.246, 0.3, 0.592, 0.6]: mean 0.391024, population var 0.0287244503
    # (A - mean) / sqrt(var + 1e-8) = [-1.026086, -0.855685, -0.537069, 1.185819, 1.233021]
    expected_white = torch.tensor([[-1.026086, 0.0, -0.855685, -0.537069], [1.185819, 1.233021, 0.0, 0.0]])
    assert torch.allclose(whitened, expected_white, atol=1e-5)
    assert torch.allclose(whitened_returns, expected_returns, atol=1e-6)


def test_gae_requires_values():
    with pytest.raises(ValueError, match="needs `values`"):
        compute_advantages("gae", token_level_rewards=torch.zeros(1, 2), response_mask=torch.ones(1, 2))


def test_reinforce_plus_plus_whitens_discounted_returns():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, -1.0, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    advantages, returns = compute_advantages("reinforce++", token_level_rewards=rewards, response_mask=mask, gamma=0.5)
    # returns-to-go, gamma 0.5: row 0 [0.25, 0.5, 1] ; row 1 [-0.5, -1] (the 7 sits on padding)
    assert torch.allclose(returns, torch.tensor([[0.25, 0.5, 1.0], [-0.5, -1.0, 0.0]]))
    # mean 0.05, population var 2.55 / 5 = 0.51, std 0.714143
    expected = torch.tensor([[0.280056, 0.630126, 1.330266], [-0.770154, -1.470294, 0.0]])
    assert torch.allclose(advantages, expected, atol=1e-5)


def test_reinforce_plus_plus_baseline_subtracts_group_mean_then_whitens():
    mask = [[1, 1], [1, 1], [1, 0]]
    rewards = outcome([1.0, 0.0, 3.0], mask)
    advantages, returns = compute_advantages(
        "reinforce++_baseline", token_level_rewards=rewards, response_mask=torch.tensor(mask), index=["g", "g", "solo"]
    )
    # group g mean 0.5: shifted last-token rewards +0.5 / -0.5, returns-to-go (gamma 1) [0.5, 0.5] / [-0.5, -0.5]
    # singleton subtracts itself: 3 - 3 = 0
    assert torch.allclose(returns, torch.tensor([[0.5, 0.5], [-0.5, -0.5], [0.0, 0.0]]))
    # valid returns [0.5, 0.5, -0.5, -0.5, 0]: mean 0, var 1/5 = 0.2 -> 0.5 / sqrt(0.2) = 1.118034
    expected = torch.tensor([[1.118034, 1.118034], [-1.118034, -1.118034], [0.0, 0.0]])
    assert torch.allclose(advantages, expected, atol=1e-5)


def test_remax_subtracts_the_greedy_baseline_reward():
    mask = [[1, 1], [1, 0]]
    advantages, returns = compute_advantages(
        "remax",
        token_level_rewards=outcome([1.0, 0.0], mask),
        response_mask=torch.tensor(mask),
        baseline_rewards=torch.tensor([0.5, 0.5]),
    )
    # return-to-go [1, 1] / [0, -] minus baseline 0.5
    assert torch.allclose(advantages, torch.tensor([[0.5, 0.5], [-0.5, 0.0]]))
    assert torch.allclose(returns, torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="baseline_rewards"):
        compute_advantages("remax", token_level_rewards=outcome([1.0], [[1]]), response_mask=torch.ones(1, 1))


def test_group_estimators_reject_missing_or_mismatched_index():
    rewards, mask = torch.zeros(2, 2), torch.ones(2, 2)
    with pytest.raises(ValueError, match="needs `index`"):
        compute_advantages("grpo", token_level_rewards=rewards, response_mask=mask)
    with pytest.raises(ValueError, match="index has 3 entries but the batch has 2"):
        compute_advantages("rloo", token_level_rewards=rewards, response_mask=mask, index=[0, 0, 1])


@pytest.mark.parametrize(
    "name", ["gae", "grpo", "rloo", "maxrl", "reinforce++", "reinforce++_baseline", "remax", "no_op"]
)
def test_padding_columns_with_garbage_do_not_change_advantages(name):
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]])
    rewards = outcome([1.0, 0.0, 0.5, 2.0], mask.tolist())
    values = torch.tensor([[0.1, 0.2, 0.3], [0.3, 0.1, 0.2], [0.5, 0.0, 0.0], [0.0, 0.4, 0.2]])
    common = dict(index=[0, 0, 1, 1], gamma=0.9, lambd=0.95, baseline_rewards=torch.tensor([0.5, 0.5, 1.0, 1.0]))
    base_adv, base_ret = compute_advantages(
        name, token_level_rewards=rewards, response_mask=mask, values=values, **common
    )
    pad = torch.full((4, 2), NAN)
    padded_adv, padded_ret = compute_advantages(
        name,
        token_level_rewards=torch.cat([torch.where(mask.bool(), rewards, NAN), pad], dim=1),
        response_mask=torch.cat([mask, torch.zeros(4, 2, dtype=mask.dtype)], dim=1),
        values=torch.cat([torch.where(mask.bool(), values, NAN), pad], dim=1),
        **common,
    )
    assert torch.allclose(padded_adv[:, :3], base_adv, atol=1e-6)
    assert torch.allclose(padded_ret[:, :3], base_ret, atol=1e-6)
    assert torch.equal(padded_adv[:, 3:], torch.zeros(4, 2))
    assert not math.isnan(padded_adv.sum().item())
