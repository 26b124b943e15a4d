"""Training strategies by name (`trainer.strategy`): how a worker shards, trains, gathers and checkpoints a model."""

from __future__ import annotations

from skyrl_train.workers.strategy.fsdp2 import FSDP2Strategy

STRATEGIES: dict[str, type] = {"fsdp2": FSDP2Strategy}
"""Strategy classes by `trainer.strategy` name (`megatron` is GPU-only and not shipped yet)."""


def strategy_class(name: str) -> type:
    """The strategy class for `trainer.strategy = name`; an unknown name lists the available ones."""
    if name not in STRATEGIES:
        raise ValueError(f"trainer.strategy={name!r} is not available; expected one of {sorted(STRATEGIES)}")
    return STRATEGIES[name]


__all__ = ["STRATEGIES", "FSDP2Strategy", "strategy_class"]
