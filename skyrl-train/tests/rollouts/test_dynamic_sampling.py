"""Dynamic sampling's one decision, `select_groups`: informative groups, `filter` and `replace`."""

import random

import pytest

from skyrl_train.rollouts import informative_groups, replace_uninformative_groups, select_groups


def _batch(make_trajectory, *groups):
    return [make_trajectory(uid, reward) for uid, rewards in groups for reward in rewards]


def test_informative_groups_ignore_failed_samples(make_trajectory):
    batch = [
        make_trajectory("a", 1.0),
        make_trajectory("a", 0.0, env_error={"kind": "timeout"}),  # the only different sample of "a" failed
        make_trajectory("b", 0.0),
        make_trajectory("b", 1.0),
        make_trajectory("c", 0.5),
    ]
    assert informative_groups(batch) == (["b"], ["a", "c"])


def test_replace_copies_informative_groups_only_when_enough_of_them(make_trajectory):
    batch = _batch(make_trajectory, ("a", (0, 1)), ("b", (1, 1)), ("c", (0, 0)))
    assert replace_uninformative_groups(batch, min_replace_ratio=0.5, rng=random.Random(0)) is None  # 1/3 <= 0.5
    trajectories, replaced = replace_uninformative_groups(batch, min_replace_ratio=0.3, rng=random.Random(0))
    assert replaced == 2 and len(trajectories) == 6
    assert [t.uid for t in trajectories] == ["a", "a", "a#copy1", "a#copy1", "a#copy2", "a#copy2"]
    assert [t.reward for t in trajectories] == [0.0, 1.0] * 3
    trajectories[2].token_rewards[-1] = 9.0  # copies are independent objects
    assert batch[1].token_rewards[-1] == 1.0


def test_filter_keeps_the_valid_samples_of_informative_groups_in_order(make_trajectory):
    batch = _batch(make_trajectory, ("a", (1, 1)), ("b", (0, 1)), ("c", (1, 0)))
    batch.insert(3, make_trajectory("b", 1.0, env_error={"kind": "exception"}))
    selection = select_groups(batch, "filter", 0.0, random.Random(0))
    assert [t.uid for t in selection.trajectories] == ["b", "b", "c", "c"]
    assert (selection.groups, selection.replaced) == (2, 0)
    assert select_groups(_batch(make_trajectory, ("a", (1, 1))), "filter", 0.0, random.Random(0)).groups == 0


def test_replace_selection_counts_its_copies_or_asks_for_another_batch(make_trajectory):
    batch = _batch(make_trajectory, ("a", (0, 1)), ("b", (1, 1)))
    selection = select_groups(batch, "replace", 0.3, random.Random(0))
    assert [t.uid for t in selection.trajectories] == ["a", "a", "a#copy1", "a#copy1"]
    assert (selection.groups, selection.replaced) == (2, 1)
    assert select_groups(batch, "replace", 0.5, random.Random(0)) is None  # 1 of 2 informative: not more than half


def test_unknown_kinds_are_refused():
    with pytest.raises(ValueError, match="must be filter or replace"):
        select_groups([], "keep", 0.0, random.Random(0))
