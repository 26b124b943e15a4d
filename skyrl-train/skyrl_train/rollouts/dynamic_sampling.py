"""Dynamic sampling: which prompt groups of a batch a step trains on (DAPO `filter`, POLARIS `replace`).

`select_groups` is the one decision every trainer mode makes: the sync and one_step_off collectors call it on each
generation round, fully_async on each group as it arrives (`filter`) or on the batch of groups it took (`replace`).
`DynamicSampling` holds the run's settings around it: the round limit, the random source `replace` draws copies
from, the `dynamic_sampling/*` metrics and the errors raised when the limit is reached.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Optional

from skyrl_train.algorithms.dapo import zero_variance_group_mask
from skyrl_train.generators.types import Trajectory

REPLICA_UID_SEPARATOR = "#copy"
"""Separator of the uid suffix given to copies of a group made by `replace` dynamic sampling."""


class DynamicSamplingError(RuntimeError):
    """Dynamic sampling used `max_sample_batches` generation batches without filling the training batch."""


def group_of(trajectory: Trajectory) -> str:
    """The group (prompt) id of a trajectory."""
    return trajectory.uid


def group_members(trajectories: list[Trajectory]) -> dict[str, list[Trajectory]]:
    """The trajectories of each group, groups in order of first appearance."""
    members: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        members.setdefault(group_of(t), []).append(t)
    return members


def group_count(trajectories: list[Trajectory]) -> int:
    """The number of distinct groups."""
    return len({group_of(t) for t in trajectories})


def informative_groups(trajectories: list[Trajectory], tol: float = 1e-6) -> tuple[list[str], list[str]]:
    """(groups with reward variance, groups without) in order of first appearance. Invalid trajectories (env
    errors) do not count toward a group's variance; a group with no valid trajectory has none."""
    valid = [t for t in trajectories if t.is_valid]
    order = list(dict.fromkeys(group_of(t) for t in trajectories))
    if not valid:
        return [], order
    flat = zero_variance_group_mask([t.reward for t in valid], [group_of(t) for t in valid], tol).tolist()
    informative = {group_of(t) for t, zero in zip(valid, flat) if not zero}
    return [g for g in order if g in informative], [g for g in order if g not in informative]


def replace_uninformative_groups(
    trajectories: list[Trajectory], min_replace_ratio: float, rng: random.Random
) -> Optional[tuple[list[Trajectory], int]]:
    """POLARIS-style `replace`: each group without reward variance is replaced by a copy of an informative group of
    the same batch, when informative groups are more than `min_replace_ratio` of all groups.

    Returns (trajectories, number of groups replaced), or None when too few groups are informative (the caller then
    samples another batch). Copies get the uid `<uid>#copy<k>` so each copy is its own group (same advantages as the
    original). Replacement groups are drawn without repeats while they last, then with repeats.
    """
    good, bad = informative_groups(trajectories)
    total = len(good) + len(bad)
    if not good or len(good) <= total * min_replace_ratio:
        return None
    if not bad:
        return list(trajectories), 0
    members = group_members(trajectories)
    pool = rng.sample(good, len(good)) if len(bad) <= len(good) else [rng.choice(good) for _ in bad]
    replacement = dict(zip(bad, pool))
    copies_made: dict[str, int] = {}
    result: list[Trajectory] = []
    for group in dict.fromkeys(group_of(t) for t in trajectories):
        if group not in replacement:
            result.extend(members[group])
            continue
        source = replacement[group]
        copies_made[source] = copies_made.get(source, 0) + 1
        uid = f"{source}{REPLICA_UID_SEPARATOR}{copies_made[source]}"
        result.extend(_copy_trajectory(t, uid) for t in members[source])
    return result, len(bad)


def _copy_trajectory(trajectory: Trajectory, uid: str) -> Trajectory:
    return replace(
        trajectory,
        uid=uid,
        prompt_token_ids=list(trajectory.prompt_token_ids),
        response_ids=list(trajectory.response_ids),
        loss_mask=list(trajectory.loss_mask),
        token_rewards=list(trajectory.token_rewards),
        rollout_logprobs=None if trajectory.rollout_logprobs is None else list(trajectory.rollout_logprobs),
    )


@dataclass
class GroupSelection:
    """What `select_groups` keeps: the trajectories to train on, group after group, the number of groups among them
    and how many of those are copies made by `replace`."""

    trajectories: list[Trajectory]
    groups: int
    replaced: int = 0


def select_groups(
    trajectories: list[Trajectory], kind: str, min_replace_ratio: float, rng: random.Random
) -> Optional[GroupSelection]:
    """The groups of `trajectories` a step trains on under dynamic sampling `kind` (a run without dynamic sampling
    trains on its trajectories as they are and does not call this):

    - `filter`: the groups with reward variance, each with its valid trajectories only (possibly none);
    - `replace`: every group, those without variance replaced by copies of informative ones; None when too few are
      informative (`replace_uninformative_groups`): the caller samples another batch.
    """
    if kind == "filter":
        good, _ = informative_groups(trajectories)
        members = group_members(trajectories)
        return GroupSelection([t for group in good for t in members[group] if t.is_valid], len(good))
    if kind == "replace":
        replaced = replace_uninformative_groups(trajectories, min_replace_ratio, rng)
        if replaced is None:
            return None
        kept, count = replaced
        return GroupSelection(kept, group_count(kept), count)
    raise ValueError(f"trainer.algorithm.dynamic_sampling.type must be filter or replace here, got {kind!r}")


class DynamicSampling:
    """A run's dynamic-sampling settings (`trainer.algorithm.dynamic_sampling`) with its round limit, random source,
    metrics and give-up errors."""

    def __init__(self, cfg: Any) -> None:
        settings = cfg.trainer.algorithm.dynamic_sampling
        self.kind: Optional[str] = settings.type
        self.min_replace_ratio: float = settings.min_replace_ratio
        self.batch_size: int = cfg.trainer.train_batch_size
        limit = settings.max_sample_batches
        self.max_rounds: int = limit if limit > 0 else 2**31 - 1
        self.rng = random.Random(cfg.trainer.seed)

    def select(self, trajectories: list[Trajectory]) -> Optional[GroupSelection]:
        """`select_groups` with this run's kind, ratio and random source."""
        return select_groups(trajectories, self.kind, self.min_replace_ratio, self.rng)

    @staticmethod
    def metrics(rounds: float, sampled: int, kept: int, replaced: int) -> dict[str, float]:
        """The `dynamic_sampling/*` metrics of one step."""
        return {
            "dynamic_sampling/rounds": float(rounds),
            "dynamic_sampling/sampled_groups": float(sampled),
            "dynamic_sampling/kept_groups": float(kept),
            "dynamic_sampling/replaced_groups": float(replaced),
        }

    def filter_gave_up(self, kept: int) -> DynamicSamplingError:
        """The error when `filter` used up `max_sample_batches` batches having kept only `kept` groups."""
        return DynamicSamplingError(
            f"dynamic sampling (filter) kept {kept} of the {self.batch_size} prompt groups a "
            f"training batch needs after trainer.algorithm.dynamic_sampling.max_sample_batches={self.max_rounds} "
            "generation batches: most prompts get the same reward on every sample. Raise max_sample_batches (-1 "
            "never gives up), use data of another difficulty, or raise generator.n_samples_per_prompt"
        )

    def replace_gave_up(self) -> DynamicSamplingError:
        """The error when `replace` found no batch informative enough in `max_sample_batches` batches."""
        return DynamicSamplingError(
            f"dynamic sampling (replace) found no batch where more than trainer.algorithm.dynamic_sampling."
            f"min_replace_ratio={self.min_replace_ratio} of the prompt groups have reward variance in "
            f"max_sample_batches={self.max_rounds} generation batches: lower min_replace_ratio, raise "
            "max_sample_batches, or check the data's difficulty"
        )
