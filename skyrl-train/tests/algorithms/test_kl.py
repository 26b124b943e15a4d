"""KL estimators, KL loss, KL-in-reward, the KL controllers and distillation rewards, by hand."""

import math

import pytest
import torch

from skyrl_train.algorithms import kl

NAN = float("nan")
LOGP = torch.tensor([-1.0, -1.5])
REF = torch.tensor([-1.5, -1.0])  # d = log p - log p_ref = [0.5, -0.5]


@pytest.mark.parametrize(
    ("estimator", "expected"),
    [
        ("k1", [0.5, -0.5]),
        ("k2", [0.125, 0.125]),  # d^2 / 2
        # exp(-d) - 1 + d: exp(-0.5) - 0.5 = 0.106531 ; exp(0.5) - 1.5 = 0.148721
        ("k3", [0.106531, 0.148721]),
        ("abs", [0.5, 0.5]),
    ],
)
def test_estimators(estimator, expected):
    assert torch.allclose(kl.kl_estimate(LOGP, REF, estimator), torch.tensor(expected), atol=1e-6)


def test_k3_is_clamped():
    # ref - logp = 30 is clamped to 20; exp(20) - 21 is then clamped to 10 ; the other way: exp(-20) + 19 -> 10
    assert torch.equal(
        kl.kl_estimate(torch.tensor([-30.0, 0.0]), torch.tensor([0.0, -30.0]), "k3"), torch.tensor([10.0, 10.0])
    )


def test_masked_estimate_ignores_padding():
    out = kl.kl_estimate(torch.tensor([[-1.0, NAN]]), torch.tensor([[-1.5, 3.0]]), "k2", torch.tensor([[1, 0]]))
    assert torch.equal(out, torch.tensor([[0.125, 0.0]]))


def test_kl_penalty_loss_token_mean():
    loss, mean_kl = kl.kl_penalty_loss(LOGP[None], REF[None], torch.ones(1, 2), "k3")
    assert loss.item() == pytest.approx((0.106531 + 0.148721) / 2, abs=1e-6)
    assert mean_kl.item() == pytest.approx(loss.item())


def test_kl_in_reward_subtracts_beta_times_kl_on_valid_tokens():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 9.0]])
    ref = torch.zeros(2, 3)
    logp = torch.tensor([[0.1, 0.2, -0.1], [0.3, 0.0, NAN]])  # k1 = logp
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    new_rewards, metrics = kl.kl_in_reward(rewards, logp, ref, mask, kl_coef=0.5, estimator="k1")
    # r - 0.5 * kl: row 0 [-0.05, -0.1, 1.05] ; row 1 [-0.15, 1.0, 0 (padding)]
    assert torch.allclose(new_rewards, torch.tensor([[-0.05, -0.1, 1.05], [-0.15, 1.0, 0.0]]))
    # per-sequence KL sums 0.2 and 0.3 -> mean 0.25 ; per token 0.5 / 5 = 0.1
    assert metrics["kl"].item() == pytest.approx(0.25)
    assert metrics["kl_token_mean"].item() == pytest.approx(0.1)


def test_adaptive_controller_follows_the_proportional_rule():
    controller = kl.AdaptiveKLController(init_kl_coef=0.1, target=0.1, horizon=10000)
    # error = clip(0.15 / 0.1 - 1, -0.2, 0.2) = 0.2 ; factor 1 + 0.2 * 1000 / 10000 = 1.02 -> 0.102
    controller.update(current_kl=0.15, n_steps=1000)
    assert controller.value == pytest.approx(0.102)
    # error = 0.09 / 0.1 - 1 = -0.1 ; factor 1 - 0.1 * 0.1 = 0.99 -> 0.10098
    controller.update(current_kl=0.09, n_steps=1000)
    assert controller.value == pytest.approx(0.10098)


def test_fixed_controller_and_factory():
    fixed = kl.make_kl_controller("fixed", 0.05)
    fixed.update(current_kl=10.0, n_steps=1000)
    assert isinstance(fixed, kl.FixedKLController) and fixed.value == 0.05
    adaptive = kl.make_kl_controller("adaptive", 0.05, target=0.2, horizon=100)
    assert isinstance(adaptive, kl.AdaptiveKLController) and (adaptive.target, adaptive.horizon) == (0.2, 100)
    with pytest.raises(ValueError, match="kl_ctrl.type must be one of"):
        kl.make_kl_controller("pid", 0.05)
    assert math.isclose(adaptive.value, 0.05)


def test_distillation_rewards_are_the_teacher_log_prob_gap_on_valid_tokens():
    policy = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.0, NAN]])
    teacher = torch.tensor([[-0.5, -2.5, -0.5], [-1.0, -1.5, NAN]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    rewards, metrics = kl.distillation_rewards(policy, teacher, mask)
    # teacher - policy: row 0 [0.5, -0.5, 0] ; row 1 [2.0, -0.5, 0 (padding)]
    assert torch.equal(rewards, torch.tensor([[0.5, -0.5, 0.0], [2.0, -0.5, 0.0]]))
    assert metrics["gap_token_mean"].item() == pytest.approx(1.5 / 5)  # 0.5 - 0.5 + 0 + 2 - 0.5 over 5 tokens
    assert metrics["gap_sequence_sum"].item() == pytest.approx((0.0 + 1.5) / 2)
