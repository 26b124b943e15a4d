"""The PPO example for real: two steps on Ray with policy, critic and reference workers and colocated hf engines."""

import math
import os

import pytest
from run_ppo import run_ppo

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY = [
    "trainer.train_batch_size=4",
    "trainer.policy_mini_batch_size=2",
    "trainer.critic_mini_batch_size=2",
    "generator.n_samples_per_prompt=4",
    "trainer.micro_train_batch_size_per_gpu=4",  # 2 prompts * 4 samples over 2 ranks: one micro-batch per rank
    "trainer.micro_forward_batch_size_per_gpu=8",
    "trainer.max_training_steps=2",
    "trainer.eval_before_train=false",
    "trainer.eval_interval=-1",
]


def _finite_series(history, key, steps):
    points = history.get(key, [])
    assert [step for step, _ in points] == list(range(1, steps + 1)), f"{key}: logged at {points}"
    return all(math.isfinite(value) for _, value in points)


def test_two_ppo_steps_train_policy_and_critic_against_the_reference(own_ray, tmp_path):
    run = run_ppo(tmp_path, TINY, train_size=16, test_size=8)
    assert run.result.global_step == 2
    assert run.experiment.roles() == ["policy", "ref", "critic"]
    history = run.result.history
    for key in ("reward/mean", "policy/loss", "critic/value_loss", "critic/values_mean", "policy/kl_to_ref_k3"):
        assert _finite_series(history, key, 2), f"{key} is not finite: {history[key]}"
    assert history["policy/kl_to_ref_k3"][0][1] == pytest.approx(0.0, abs=1e-6)  # step 1: policy == reference
    before, after = run.eval_accuracy()
    assert math.isnan(before) and 0.0 <= after <= 1.0  # eval only after training
    checkpoint = run.experiment.trainer.checkpoints.saved_paths[-1]
    assert os.path.isdir(os.path.join(checkpoint, "policy")) and os.path.isdir(os.path.join(checkpoint, "critic"))
