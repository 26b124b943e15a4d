"""AdamW and its learning-rate schedule built from a role's `optimizer` config section."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

import torch
from transformers import get_scheduler

from skyrl_train.config.roles import OptimizerConfig


def build_optimizer(parameters: Iterable[torch.nn.Parameter], config: OptimizerConfig) -> torch.optim.AdamW:
    """AdamW over the trainable `parameters` with `lr`, `adam_betas` and `weight_decay` from `config`.

    Parameters on CPU get torch's fused AdamW kernel (one pass over each tensor); torch's own default there is a
    Python loop over the tensors, several times slower. Elsewhere torch chooses the implementation."""
    trainable = [p for p in parameters if p.requires_grad]
    if not trainable:
        raise ValueError("the model has no trainable parameters (requires_grad=False everywhere); nothing to optimize")
    if len(config.adam_betas) != 2:
        raise ValueError(f"optimizer.adam_betas must hold two numbers (beta1, beta2), got {config.adam_betas}")
    beta1, beta2 = (float(b) for b in config.adam_betas)
    fused = all(p.device.type == "cpu" for p in trainable) or None  # None: torch's own choice
    return torch.optim.AdamW(
        trainable, lr=config.lr, betas=(beta1, beta2), weight_decay=config.weight_decay, fused=fused
    )


def build_scheduler(
    optimizer: torch.optim.Optimizer, config: OptimizerConfig, num_training_steps: Optional[int] = None
) -> torch.optim.lr_scheduler.LRScheduler:
    """The `transformers.get_scheduler` schedule named by `optimizer.scheduler`, stepped once per optimizer step.

    Decaying schedules (`linear`, `cosine`, ...) need `num_training_steps`, the total optimizer steps of the run.
    """
    try:
        return get_scheduler(
            config.scheduler,
            optimizer,
            num_warmup_steps=config.num_warmup_steps,
            num_training_steps=num_training_steps,
        )
    except ValueError as exc:
        raise ValueError(
            f"cannot build the learning-rate schedule optimizer.scheduler={config.scheduler!r} "
            f"(num_warmup_steps={config.num_warmup_steps}, num_training_steps={num_training_steps}): {exc}"
        ) from exc


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    """The learning rate of the first parameter group (the one the next step uses)."""
    return float(optimizer.param_groups[0]["lr"])
