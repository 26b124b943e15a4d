"""`trainer.reward_metrics`: the step's `reward/*` metrics from a batch of trajectories, checked against values worked
out by hand (and torch's sample standard deviation)."""

import pytest
import torch

from skyrl_train.generators.types import GeneratorOutput
from skyrl_train.trainer import reward_metrics


def test_reward_metrics_mean_sample_std_pass_at_n_and_groups_with_signal(make_trajectory):
    # group a: one sample solved (mixed); group b: none solved (all 0); group c: both at 0.5 (no signal, not passed)
    rewards = {"a": [1.0, 0.0], "b": [0.0, 0.0], "c": [0.5, 0.5]}
    trajectories = [make_trajectory(uid, r) for uid, values in rewards.items() for r in values]
    metrics = reward_metrics(GeneratorOutput(trajectories, {"generate/reward_mean": 0.25}), n_samples=2)
    flat = torch.tensor([r for values in rewards.values() for r in values], dtype=torch.float64)
    assert metrics["reward/mean"] == pytest.approx(2.0 / 6)
    assert metrics["reward/std"] == pytest.approx(float(flat.std()))  # the sample (n - 1) standard deviation
    assert metrics["reward/pass_at_2"] == pytest.approx(1 / 3)  # a reward of 1 counts as solved
    assert metrics["reward/groups_with_signal"] == pytest.approx(1 / 3)
    assert metrics["generate/reward_mean"] == 0.25  # the generator's own metrics pass through


def test_reward_metrics_of_a_single_trajectory_have_zero_std(make_trajectory):
    metrics = reward_metrics(GeneratorOutput([make_trajectory("a", 1.0)]), n_samples=1)
    assert metrics == {
        "reward/mean": 1.0,
        "reward/std": 0.0,
        "reward/pass_at_1": 1.0,
        "reward/groups_with_signal": 0.0,
    }
