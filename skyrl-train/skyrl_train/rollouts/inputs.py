"""The generator input of one rollout batch, built from explicit arguments only (a pure function).

Every mode builds its inputs here, so what decides a sample's seed and uid is written once:

- seeds: `(base_seed * 1_000_003 + seed_key * 100_003 + round * 7_919_009 + row * 101) mod 2^31` per row, where
  `seed_key` is the step whose batch this is (sync and one_step_off) or `FULLY_ASYNC_SEED_KEY + group` (a fully
  async prompt group), and `round` counts the extra batches dynamic sampling draws within one step;
- uids: `<uid prefix><dataset uid>`; all samples of one prompt share it, which is what groups them for advantages.
"""

from __future__ import annotations

from typing import Any, Optional

from skyrl_train.generators.types import GeneratorInput

FULLY_ASYNC_SEED_KEY = 1_000_000
"""Seed key of fully async group 0: group g draws with key `FULLY_ASYNC_SEED_KEY + g`, far from any step's key."""


def step_uid_prefix(step: int, round_index: int = 0) -> str:
    """`<step>/` for a step's first batch, `<step>.<round>/` for dynamic sampling's later ones."""
    return f"{step}/" if round_index == 0 else f"{step}.{round_index}/"


def group_uid_prefix(group: int) -> str:
    """`g<group>/`: the uid prefix of a fully async prompt group."""
    return f"g{group}/"


def row_seeds(base_seed: Optional[int], seed_key: int, round_index: int, num_rows: int) -> Optional[list[int]]:
    """A seed per row, independent of how rows are batched; None when sampling is unseeded (`base_seed` None)."""
    if base_seed is None:
        return None
    offset = base_seed * 1_000_003 + seed_key * 100_003 + round_index * 7_919_009
    return [(offset + row * 101) % 2**31 for row in range(num_rows)]


def make_generator_input(
    items: list[dict[str, Any]],
    n_samples: int,
    base_seed: Optional[int],
    seed_key: int,
    round_index: int,
    uid_prefix: str,
    metadata: dict[str, Any],
) -> GeneratorInput:
    """Each prompt of `items` repeated `n_samples` times, with per-row seeds (see the module docstring), uids
    `uid_prefix + item["uid"]` and `metadata` as the batch metadata."""
    repeated = [item for item in items for _ in range(n_samples)]
    return GeneratorInput(
        seeds=row_seeds(base_seed, seed_key, round_index, len(repeated)),
        prompts=[item["prompt"] for item in repeated],
        env_classes=[item["env_class"] for item in repeated],
        env_extras=[dict(item["env_extras"]) for item in repeated],
        uids=[f"{uid_prefix}{item['uid']}" for item in repeated],
        batch_metadata=dict(metadata),
    )
