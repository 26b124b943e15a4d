"""How many torch threads an actor runs."""

from __future__ import annotations

from typing import Optional


def actor_threads(configured: Optional[int], cpus: float) -> int:
    """Torch threads of an actor: the configured count, else its share of CPUs rounded down (at least 1)."""
    return configured if configured is not None else max(1, int(cpus))
