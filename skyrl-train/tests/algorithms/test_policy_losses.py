"""Policy losses against hand-computed values and gradients; padding never changes the loss or its gradient."""

import math

import pytest
import torch

from skyrl_train.algorithms import POLICY_LOSSES, PolicyLossConfig, compute_policy_loss

NAN = float("nan")
LN = math.log


def leaf(values):
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def run(name, log_probs, old, adv, mask, config=None, rollout=None):
    log_probs = leaf(log_probs)
    loss, metrics = compute_policy_loss(
        name,
        log_probs=log_probs,
        old_log_probs=None if old is None else torch.tensor(old),
        advantages=None if adv is None else torch.tensor(adv),
        loss_mask=torch.tensor(mask, dtype=torch.float32),
        config=config,
        rollout_log_probs=None if rollout is None else torch.tensor(rollout),
    )
    loss.backward()
    return loss.item(), metrics, log_probs.grad


# Five valid tokens (old log-prob 0, so log_probs = log r) and one padding token holding garbage.
#   token: (r, A)  = row 0: (1.5, +1) (0.5, +1) (0.5, -1) ; row 1: (1.5, -1) (1.1, +2) pad
PPO_LOGP = [[LN(1.5), LN(0.5), LN(0.5)], [LN(1.5), LN(1.1), NAN]]
PPO_OLD = [[0.0, 0.0, 0.0], [0.0, 0.0, 50.0]]
PPO_ADV = [[1.0, 1.0, -1.0], [-1.0, 2.0, NAN]]
PPO_MASK = [[1, 1, 1], [1, 1, 0]]
CLIP_HIGHER = {"eps_clip_low": 0.2, "eps_clip_high": 0.28}


def test_regular_ppo_with_clip_higher():
    loss, metrics, grad = run("regular", PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK, CLIP_HIGHER)
    # per token max(-A r, -A clip(r, 0.8, 1.28)):
    #   (1.5,+1): max(-1.5, -1.28) = -1.28 clipped   (0.5,+1): max(-0.5, -0.8) = -0.5
    #   (0.5,-1): max(0.5, 0.8) = 0.8 clipped        (1.5,-1): max(1.5, 1.28) = 1.5     (1.1,+2): -2.2
    # token_mean = (-1.28 - 0.5 + 0.8 + 1.5 - 2.2) / 5 = -0.336
    assert loss == pytest.approx(-0.336, abs=1e-6)
    assert metrics["clip_frac"].item() == pytest.approx(0.4)
    assert metrics["clip_frac_high"].item() == pytest.approx(0.2)
    assert metrics["clip_frac_low"].item() == pytest.approx(0.2)
    # ratio mean (1.5 + 0.5 + 0.5 + 1.5 + 1.1) / 5 = 1.02
    assert metrics["ratio_mean"].item() == pytest.approx(1.02, abs=1e-6)
    assert (metrics["ratio_min"].item(), metrics["ratio_max"].item()) == pytest.approx((0.5, 1.5))
    # approx_kl = mean(r - 1 - ln r) = (2*0.094535 + 2*0.193147 + 0.004690) / 5 = 0.116011
    assert metrics["approx_kl"].item() == pytest.approx(0.116011, abs=1e-5)
    # d/d log p of -A r is -A r on unclipped tokens, 0 on clipped ones; divided by 5 tokens
    expected_grad = torch.tensor([[0.0, -0.1, 0.0], [0.3, -0.44, 0.0]])
    assert torch.allclose(grad, expected_grad, atol=1e-6)


@pytest.mark.parametrize(
    ("reduction", "max_seq_len", "expected"),
    [
        # per-sequence means: (-1.28 - 0.5 + 0.8) / 3 = -0.326667 ; (1.5 - 2.2) / 2 = -0.35 -> mean -0.338333
        ("sequence_mean", None, -0.338333),
        # per-sequence sums / 4: -0.98 / 4 = -0.245 ; -0.7 / 4 = -0.175 -> mean -0.21
        ("seq_mean_token_sum_norm", 4, -0.21),
        ("token_sum", None, -1.68),
    ],
)
def test_regular_ppo_under_each_reduction(reduction, max_seq_len, expected):
    config = PolicyLossConfig(**CLIP_HIGHER, loss_reduction=reduction, max_seq_len=max_seq_len)
    loss, _, _ = run("regular", PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK, config)
    assert loss == pytest.approx(expected, abs=1e-5)


def test_dual_clip_caps_negative_advantage_tokens():
    # (r, A): row 0 (4, -1) (2, -1) ; row 1 (4, +1) (0.5, -1) ; eps 0.2, clip_ratio_c 3
    logp = [[LN(4.0), LN(2.0)], [LN(4.0), LN(0.5)]]
    adv = [[-1.0, -1.0], [1.0, -1.0]]
    loss, metrics, grad = run("dual_clip", logp, [[0.0, 0.0], [0.0, 0.0]], adv, [[1, 1], [1, 1]], {"clip_ratio_c": 3.0})
    # (4,-1): ppo max(4, 1.2) = 4 -> min(4, 3) = 3 (dual cap)   (2,-1): ppo 2 < 3 -> 2
    # (4,+1): ppo max(-4, -1.2) = -1.2 (no cap for A > 0)      (0.5,-1): ppo max(0.5, 0.8) = 0.8
    # mean (3 + 2 - 1.2 + 0.8) / 4 = 1.15
    assert loss == pytest.approx(1.15, abs=1e-6)
    assert metrics["dual_clip_frac"].item() == pytest.approx(0.25)
    assert metrics["clip_frac"].item() == pytest.approx(0.5)
    # only (2,-1) is on the unclipped branch: d(-A r)/d log p = r = 2, / 4 tokens
    assert torch.allclose(grad, torch.tensor([[0.0, 0.5], [0.0, 0.0]]), atol=1e-6)


def test_dual_clip_rejects_a_bound_not_above_one():
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        PolicyLossConfig(clip_ratio_c=0.9)


def test_gspo_uses_the_length_normalised_sequence_ratio():
    # row 0: log r = [ln 2, 0] -> s = exp(ln2 / 2) = sqrt 2 = 1.414214, A = +1
    # row 1: log r = [ln 0.5] + pad -> s = 0.5, A = -1 ; clip range [0.4, 1.5] leaves both unclipped
    logp = [[LN(2.0) - 1.0, -1.0], [LN(0.5) - 2.0, NAN]]
    old = [[-1.0, -1.0], [-2.0, 0.0]]
    adv = [[1.0, 1.0], [-1.0, NAN]]
    config = {"eps_clip_low": 0.6, "eps_clip_high": 0.5, "loss_reduction": "sequence_mean"}
    loss, metrics, grad = run("gspo", logp, old, adv, [[1, 1], [1, 0]], config)
    # per token -A s: row 0 -1.414214 (both tokens), row 1 +0.5 ; sequence_mean -> (-1.414214 + 0.5) / 2
    assert loss == pytest.approx(-0.457107, abs=1e-5)
    # gradient of -A * s_i w.r.t. log p_t is -A s_i / |y_i|, times 1/2 sequences:
    #   row 0: -1.414214 / 2 / 2 = -0.353553 per token ; row 1: 0.5 / 1 / 2 = 0.25
    assert torch.allclose(grad, torch.tensor([[-0.353553, -0.353553], [0.25, 0.0]]), atol=1e-5)
    assert metrics["ratio_mean"].item() == pytest.approx((math.sqrt(2) + 0.5) / 2, abs=1e-5)
    assert metrics["clip_frac"].item() == 0.0


def test_cispo_keeps_gradient_on_clipped_tokens_through_a_detached_weight():
    # token 1: log p = ln 0.6, old ln 0.4 -> r = 1.5, clipped to 1 + 0.2 = 1.2, A = +1
    # token 2: log p = ln 0.2, old ln 0.4 -> r = 0.5 (lower bound 1 - 1.0 = 0), A = -2
    logp = [[LN(0.6), LN(0.2)]]
    old = [[LN(0.4), LN(0.4)]]
    config = {"cispo_eps_clip_low": 1.0, "cispo_eps_clip_high": 0.2}
    loss, metrics, grad = run("cispo", logp, old, [[1.0, -2.0]], [[1, 1]], config)
    # -w A log p: -1.2 * 1 * ln 0.6 = 0.612991 ; -0.5 * (-2) * ln 0.2 = -1.609438 ; mean -0.498224
    assert loss == pytest.approx(-0.498224, abs=1e-5)
    # gradient -w A / 2: the weight is a constant, so the clipped token still learns: [-1.2/2, 1.0/2]
    assert torch.allclose(grad, torch.tensor([[-0.6, 0.5]]), atol=1e-6)
    assert metrics["clip_frac"].item() == pytest.approx(0.5)


def test_cispo_rollout_anchor_uses_rollout_log_probs():
    logp = [[LN(0.6), LN(0.2)]]
    config = {"cispo_anchor": "rollout", "cispo_eps_clip_high": 0.2}
    # rollout log-probs equal the current ones -> r = 1, w = 1: (-ln 0.6 + 2 ln 0.2) / 2 = -1.354025
    loss, _, _ = run("cispo", logp, [[0.0, 0.0]], [[1.0, -2.0]], [[1, 1]], config, rollout=logp)
    assert loss == pytest.approx(-1.354025, abs=1e-5)
    with pytest.raises(ValueError, match="needs `rollout_log_probs`"):
        run("cispo", logp, [[0.0, 0.0]], [[1.0, -2.0]], [[1, 1]], config)


def test_sapo_soft_gate_value_and_gradient():
    # token 1: r = 1, A = +1, tau_pos 1: gate = sigmoid(0) * 4 / 1 = 2 -> loss -2
    # token 2: r = 1.5, A = -1, tau_neg 2: gate = sigmoid(1) * 4 / 2 = 1.462117 -> loss +1.462117
    loss, metrics, grad = run(
        "sapo", [[0.0, LN(1.5)]], [[0.0, 0.0]], [[1.0, -1.0]], [[1, 1]], {"tau_pos": 1.0, "tau_neg": 2.0}
    )
    assert loss == pytest.approx((-2 + 1.462117) / 2, abs=1e-5)
    assert metrics["gate_mean"].item() == pytest.approx((2 + 1.462117) / 2, abs=1e-5)
    # d gate / d r = 4 s (1 - s), s = sigmoid(tau (r - 1)); d/d log p = r * that
    #   token 1: -A * 4 * 0.25 * 1 = -1 -> /2 = -0.5
    #   token 2: -A * 4 * 0.731059 * 0.268941 * 1.5 = 1.179672 -> /2 = 0.589836
    assert torch.allclose(grad, torch.tensor([[-0.5, 0.589836]]), atol=1e-5)


def test_importance_sampling_is_unclipped():
    # (r, A) = (1.5, +1), (0.5, -1): -r A = -1.5, 0.5
    loss, _, grad = run(
        "importance_sampling",
        [[LN(1.5), LN(0.5)]],
        [[0.0, 0.0]],
        [[1.0, -1.0]],
        [[1, 1]],
        {"loss_reduction": "token_sum"},
    )
    assert loss == pytest.approx(-1.0, abs=1e-6)
    assert torch.allclose(grad, torch.tensor([[-1.5, 0.5]]), atol=1e-6)


def test_cross_entropy_is_the_nll_of_the_tokens():
    loss, metrics, grad = run("cross_entropy", [[-1.0, -2.0], [-0.5, NAN]], None, None, [[1, 1], [1, 0]])
    # (1 + 2 + 0.5) / 3 tokens
    assert loss == pytest.approx(3.5 / 3, abs=1e-6)
    assert metrics["nll"].item() == pytest.approx(3.5 / 3, abs=1e-6)
    assert torch.allclose(grad, torch.tensor([[-1 / 3, -1 / 3], [-1 / 3, 0.0]]))


def test_token_tis_weights_the_per_token_loss():
    # r = 1 (log_probs = old), A = +1 -> per-token loss -1 ; old - rollout = [ln 3, ln 0.5], cap 2 -> weights [2, 0.5]
    config = {"off_policy": {"tis_ratio_type": "token", "token_tis_ratio_clip_high": 2.0}}
    rollout = [[-LN(3.0), -LN(0.5)]]
    loss, metrics, _ = run("importance_sampling", [[0.0, 0.0]], [[0.0, 0.0]], [[1.0, 1.0]], [[1, 1]], config, rollout)
    assert loss == pytest.approx((-2.0 - 0.5) / 2, abs=1e-6)
    assert metrics["off_policy/tis_token_clip_frac"].item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="rollout_log_probs is required"):
        run("importance_sampling", [[0.0, 0.0]], [[0.0, 0.0]], [[1.0, 1.0]], [[1, 1]], config)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"unknown policy loss config keys \['eps_clip'\]"):
        run("regular", PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK, {"eps_clip": 0.2})
    with pytest.raises(ValueError, match="cispo_anchor must be one of"):
        PolicyLossConfig(cispo_anchor="new")
    with pytest.raises(ValueError, match="off_policy.tis_ratio_type must be one of"):
        PolicyLossConfig.from_mapping({"off_policy": {"tis_ratio_type": "tokens"}})
    with pytest.raises(ValueError, match="needs max_seq_len"):
        run("regular", PPO_LOGP, PPO_OLD, PPO_ADV, PPO_MASK, {"loss_reduction": "seq_mean_token_sum_norm"})
    with pytest.raises(ValueError, match="policy loss 'regular' needs `old_log_probs`"):
        run("regular", PPO_LOGP, None, PPO_ADV, PPO_MASK)


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
@pytest.mark.parametrize("reduction", ["token_mean", "sequence_mean", "seq_mean_token_sum_norm"])
def test_padding_with_garbage_changes_neither_loss_nor_gradient(name, reduction):
    generator = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    log_probs = -torch.rand(3, 4, generator=generator) - 0.1
    old = log_probs + 0.3 * torch.randn(3, 4, generator=generator)
    rollout = old + 0.05 * torch.randn(3, 4, generator=generator)
    adv = torch.randn(3, 4, generator=generator)
    config = PolicyLossConfig(
        loss_reduction=reduction,
        max_seq_len=8,
        clip_cov_ratio=0.2,
        clip_cov_lb=-10.0,
        kl_cov_frac=0.2,
        off_policy={"tis_ratio_type": "token", "sequence_mask_metric": "product"},
    )

    def loss_and_grad(lp, old_lp, adv_, roll, mask_):
        lp = lp.clone().requires_grad_(True)
        loss, _ = compute_policy_loss(
            name,
            log_probs=lp,
            old_log_probs=old_lp,
            advantages=adv_,
            loss_mask=mask_,
            config=config,
            rollout_log_probs=roll,
        )
        loss.backward()
        return loss.detach(), lp.grad

    base_loss, base_grad = loss_and_grad(log_probs, old, adv, rollout, mask)

    def garbage(t, value):
        return torch.cat([torch.where(mask.bool(), t, value), torch.full((3, 2), value)], dim=1)

    padded_mask = torch.cat([mask, torch.zeros(3, 2)], dim=1)
    pad_loss, pad_grad = loss_and_grad(
        garbage(log_probs, NAN), garbage(old, 1e4), garbage(adv, NAN), garbage(rollout, -1e4), padded_mask
    )
    assert torch.allclose(pad_loss, base_loss, atol=1e-6), (pad_loss, base_loss)
    assert torch.allclose(pad_grad[:, :4], base_grad, atol=1e-6)
    assert torch.equal(pad_grad * (1 - padded_mask), torch.zeros(3, 6))
