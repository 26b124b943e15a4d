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
