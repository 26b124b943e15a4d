"""AdamW and LR schedules built from an `optimizer` config section."""

import pytest
import torch

from skyrl_train.config import OptimizerConfig
from skyrl_train.workers.strategy.optimizer import build_optimizer, build_scheduler, current_lr


def _params():
    frozen = torch.nn.Parameter(torch.zeros(2), requires_grad=False)
    return [torch.nn.Parameter(torch.ones(3)), frozen]


def test_adamw_takes_lr_betas_and_weight_decay_and_skips_frozen_parameters():
    optimizer = build_optimizer(_params(), OptimizerConfig(lr=0.01, adam_betas=[0.8, 0.95], weight_decay=0.1))
    group = optimizer.param_groups[0]
    assert isinstance(optimizer, torch.optim.AdamW)
    assert (group["lr"], group["betas"], group["weight_decay"]) == (0.01, (0.8, 0.95), 0.1)
    assert len(group["params"]) == 1


def test_cpu_parameters_take_the_fused_kernel_and_match_the_per_tensor_loop():
    torch.manual_seed(0)
    shapes = [(64, 32), (32,), (7, 5, 3)]
    start = [torch.randn(shape) for shape in shapes]
    grads = [[torch.randn(shape) for shape in shapes] for _ in range(5)]
    config = OptimizerConfig(lr=1e-2, weight_decay=0.1)
    fused_params = [torch.nn.Parameter(t.clone()) for t in start]
    fused = build_optimizer(fused_params, config)
    assert fused.param_groups[0]["fused"] is True
    looped_params = [torch.nn.Parameter(t.clone()) for t in start]
    looped = torch.optim.AdamW(looped_params, lr=1e-2, weight_decay=0.1, foreach=False)
    for step_grads in grads:
        for params, optimizer in ((fused_params, fused), (looped_params, looped)):
            for param, grad in zip(params, step_grads):
                param.grad = grad.clone()
            optimizer.step()
    # Same update rule; only the order of float operations differs: a few ulps of parameters of order 1.
    for a, b in zip(fused_params, looped_params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        assert not torch.equal(a, torch.zeros_like(a))


def test_optimizer_errors_name_the_problem():
    with pytest.raises(ValueError, match="no trainable parameters"):
        build_optimizer([torch.nn.Parameter(torch.zeros(1), requires_grad=False)], OptimizerConfig())
    with pytest.raises(ValueError, match=r"adam_betas must hold two numbers"):
        build_optimizer(_params(), OptimizerConfig(adam_betas=[0.9]))


def test_linear_warmup_then_cosine_decay_by_hand():
    config = OptimizerConfig(lr=1.0, scheduler="cosine", num_warmup_steps=2)
    optimizer = build_optimizer(_params(), config)
    scheduler = build_scheduler(optimizer, config, num_training_steps=6)
    seen = []
    for _ in range(6):
        seen.append(current_lr(optimizer))
        optimizer.step()
        scheduler.step()
    # warm-up 0, 1/2; then 0.5 * (1 + cos(pi * k / 4)) for k = 0..3: 1, 0.853553, 0.5, 0.146447
    assert seen == pytest.approx([0.0, 0.5, 1.0, 0.853553, 0.5, 0.146447], abs=1e-6)


def test_scheduler_errors_name_the_config_field():
    optimizer = build_optimizer(_params(), OptimizerConfig())
    with pytest.raises(ValueError, match="optimizer.scheduler='linear'.*num_training_steps=None"):
        build_scheduler(optimizer, OptimizerConfig(scheduler="linear"))
    with pytest.raises(ValueError, match="optimizer.scheduler='bogus'"):
        build_scheduler(optimizer, OptimizerConfig(scheduler="bogus"), num_training_steps=3)
