"""Clip-Cov and KL-Cov: covariance scores, exact token selection, detached gradients, KL penalty."""

import math

import pytest
import torch

from skyrl_train.algorithms import compute_policy_loss, select_top_tokens, token_covariance

NAN = float("nan")

# Four valid tokens laid out as two rows of two, plus a garbage padding column.
#   log p = [-1, -2 | -3, -4], A = [2, 0 | 0, -1]
#   mean log p = -2.5, mean A = 0.25
#   cov = (1.5)(1.75) = 2.625 ; (0.5)(-0.25) = -0.125 ; (-0.5)(-0.25) = 0.125 ; (-1.5)(-1.25) = 1.875
LOGP = [[-1.0, -2.0, 100.0], [-3.0, -4.0, NAN]]
ADV = [[2.0, 0.0, NAN], [0.0, -1.0, 5.0]]
MASK = [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]]


def test_token_covariance_is_centred_over_valid_tokens():
    cov = token_covariance(torch.tensor(LOGP), torch.tensor(ADV), torch.tensor(MASK))
    assert torch.allclose(cov, torch.tensor([[2.625, -0.125, 0.0], [0.125, 1.875, 0.0]]))


def test_selection_takes_the_top_k_eligible_with_k_at_least_one():
    cov = torch.tensor([[2.625, -0.125, 0.0], [0.125, 1.875, 0.0]])
    mask = torch.tensor(MASK)
    eligible = (cov >= 1.0) & (cov <= 5.0)
    # 0.25 * 4 valid = 1 token ; 0.01 * 4 = 0.04 -> still at least 1 ; 0.75 * 4 = 3, but only 2 are eligible
    top1 = torch.tensor([[True, False, False], [False, False, False]])
    assert torch.equal(select_top_tokens(cov, eligible, 0.25, mask), top1)
    assert torch.equal(select_top_tokens(cov, eligible, 0.01, mask), top1)
    assert torch.equal(select_top_tokens(cov, eligible, 0.75, mask), eligible)
    assert not select_top_tokens(cov, eligible, 0.0, mask).any()


def run(name, config, old=None):
    log_probs = torch.tensor(LOGP, requires_grad=True)
    old = torch.tensor(LOGP) if old is None else torch.tensor(old)
    loss, metrics = compute_policy_loss(
        name,
        log_probs=log_probs,
        old_log_probs=old,
        advantages=torch.tensor(ADV),
        loss_mask=torch.tensor(MASK),
        config=config,
    )
    loss.backward()
    return loss.item(), metrics, log_probs.grad


@pytest.mark.parametrize(
    ("clip_cov_ratio", "expected_grad", "expected_frac"),
    [
        # ratio 1 everywhere -> per-token loss -A, token_mean gradient -A/4 = [-0.5, 0 | 0, 0.25]
        (0.25, [[0.0, 0.0, 0.0], [0.0, 0.25, 0.0]], 0.25),  # token 1 (cov 2.625) detached
        (0.5, [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], 0.5),  # tokens 1 and 4 (cov 1.875) detached
    ],
)
def test_clip_cov_detaches_selected_tokens_but_keeps_the_loss_value(clip_cov_ratio, expected_grad, expected_frac):
    config = {"clip_cov_ratio": clip_cov_ratio, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}
    loss, metrics, grad = run("clip_cov", config)
    # -(2 + 0 + 0 - 1) / 4 = -0.25, identical to regular PPO
    assert loss == pytest.approx(-0.25)
    assert torch.allclose(grad, torch.tensor(expected_grad))
    assert metrics["clip_cov_frac"].item() == pytest.approx(expected_frac)


def test_clip_cov_bounds_exclude_tokens_outside_them():
    # ub 2.0 excludes token 1 (cov 2.625): the top eligible token is token 4 (cov 1.875)
    _, _, grad = run("clip_cov", {"clip_cov_ratio": 0.25, "clip_cov_lb": 1.0, "clip_cov_ub": 2.0})
    assert torch.allclose(grad, torch.tensor([[-0.5, 0.0, 0.0], [0.0, 0.0, 0.0]]))


def test_kl_cov_penalises_the_top_covariance_token():
    # old log p of token 1 is 0.2 lower -> r = exp(0.2) = 1.221403 ; other tokens r = 1
    old = [[-1.2, -2.0, 0.0], [-3.0, -4.0, 0.0]]
    loss, metrics, grad = run("kl_cov", {"kl_cov_frac": 0.25, "kl_cov_coef": 1.0}, old)
    # token 1: -2 * 1.221403 + |0.2| = -2.242806 ; tokens 2, 3: 0 ; token 4: -(-1) * 1 = 1 -> mean -0.310701
    assert loss == pytest.approx(-0.310701, abs=1e-5)
    # token 1: (-A r + sign(log r)) / 4 = (-2.442806 + 1) / 4 = -0.360701 ; token 4: (-A r) / 4 = 0.25
    expected = torch.tensor([[-0.360701, 0.0, 0.0], [0.0, 0.25, 0.0]])
    assert torch.allclose(grad, expected, atol=1e-5)
    assert metrics["kl_cov_frac"].item() == pytest.approx(0.25)
    assert metrics["ratio_max"].item() == pytest.approx(math.exp(0.2), abs=1e-5)
