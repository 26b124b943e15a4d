"""Training strategies by name (`trainer.strategy`): how a worker shards, trains, gathers and checkpoints a model."""

from __future__ import annotations

from skyrl_train.workers.strategy.fsdp2 import FSDP2Strategy
from skyrl_train.workers.strategy.megatron import MegatronStrategy

STRATEGIES: dict[str, type] = {"fsdp2": FSDP2Strategy, "megatron": MegatronStrategy}
"""Strategy classes by `trainer.strategy` name (`megatron` needs CUDA and megatron-core; it imports lazily)."""


def strategy_class(name: str) -> type:
    """The strategy class for `trainer.strategy = name`; an unknown name lists the available ones."""
    if name not in STRATEGIES:
        raise ValueError(f"trainer.strategy={name!r} is not available; expected one of {sorted(STRATEGIES)}")
    return STRATEGIES[name]


__all__ = ["STRATEGIES", "FSDP2Strategy", "MegatronStrategy", "strategy_class"]
