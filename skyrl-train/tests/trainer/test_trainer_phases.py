"""The trainer's phases read their config keys: advantages (estimator, gamma, lambd, grpo_norm_by_std), the rollout
input (n_samples_per_prompt, the sampling seed) and the mini-batches (policy/critic mini-batch sizes).

A real `RayPPOTrainer` is built without workers or engines: these phases use none of them.
"""

import pytest
import torch

from skyrl_train.config import SkyRLConfig
from skyrl_train.generators.types import Trajectory
from skyrl_train.trainer import RayPPOTrainer
from skyrl_train.training_batch import TrainingBatch
from skyrl_train.workers.roles import TrainedRole


def _trainer(*overrides: str) -> RayPPOTrainer:
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "trainer.train_batch_size=4",
            "trainer.policy_mini_batch_size=2",
            "trainer.critic_mini_batch_size=1",
            *overrides,
        ]
    )
    parts = dict(policy=None, ref=None, critic=None, client=None, generator=None, weight_sync=None, tracker=None)
    return RayPPOTrainer(cfg, tokenizer=None, train_loader=None, eval_items=[], **parts)


def _batch() -> TrainingBatch:
    rewards = [1.0, 0.0, 0.0, 0.0]  # prompt "a": 1, 0; prompt "b": 0, 0
    trajectories = [
        Trajectory(
            uid=uid,
            env_class="test",
            prompt_token_ids=[5, 6],
            response_ids=[7, 8, 9],
            loss_mask=[1, 1, 1],
            token_rewards=[0.0, 0.0, reward],
            rollout_logprobs=[-1.0, -1.0, -1.0],
            stop_reason="stop",
            num_turns=1,
            weight_version=0,
        )
        for uid, reward in zip(["a", "a", "b", "b"], rewards)
    ]
    return TrainingBatch.from_trajectories(trajectories, pad_token_id=0)


def test_advantages_follow_the_estimator_and_its_settings():
    batch = _batch()
    grpo, _ = _trainer().advantages(batch, None)
    # group "a": rewards 1, 0 -> mean 0.5, std 0.7071 (unbiased) -> +-0.7071 on every token
    assert torch.allclose(grpo[0], torch.full((3,), 0.7071), atol=1e-3)
    padded_std, _ = _trainer("trainer.algorithm.grpo_std_epsilon=1.0").advantages(batch, None)
    assert torch.allclose(padded_std[0], torch.full((3,), 0.5 / 1.7071), atol=1e-4)
    mean_only, _ = _trainer("trainer.algorithm.grpo_norm_by_std=false").advantages(batch, None)
    assert torch.allclose(mean_only[0], torch.full((3,), 0.5))
    plain, _ = _trainer("trainer.algorithm.advantage_estimator=reinforce++").advantages(batch, None)
    discounted, _ = _trainer(
        "trainer.algorithm.advantage_estimator=reinforce++", "trainer.algorithm.gamma=0.5"
    ).advantages(batch, None)
    assert not torch.allclose(plain, discounted)  # returns-to-go 1, 1, 1 vs 0.25, 0.5, 1 on the rewarded row
    values = torch.zeros(4, 3)
    critic = ["trainer.critic.model.path=critic", "trainer.algorithm.advantage_estimator=gae"]
    _, returns_lambda_1 = _trainer(*critic).advantages(batch, values)
    _, returns_lambda_0 = _trainer(*critic, "trainer.algorithm.lambd=0.0", "trainer.algorithm.gamma=0.5").advantages(
        batch, values
    )
    assert torch.allclose(returns_lambda_1[0], torch.tensor([1.0, 1.0, 1.0]))
    assert torch.allclose(returns_lambda_0[0], torch.tensor([0.0, 0.0, 1.0]))  # lambda 0: one-step TD on V = 0


def test_rollout_input_repeats_prompts_and_seeds_rows_from_the_sampling_seed():
    items = [{"prompt": [{"role": "user", "content": "q"}], "env_class": "gsm8k", "env_extras": {}, "uid": "0:0"}]
    unseeded = _trainer("generator.n_samples_per_prompt=3").source.batches.for_step(1)(items, 0)
    assert len(unseeded.prompts) == 3 and unseeded.seeds is None and len(set(unseeded.uids)) == 1
    seeded = _trainer("generator.n_samples_per_prompt=3", "generator.sampling_params.seed=7").source.batches
    other = _trainer("generator.n_samples_per_prompt=3", "generator.sampling_params.seed=8").source.batches
    seeded, other = seeded.for_step(1)(items, 0), other.for_step(1)(items, 0)
    assert len(set(seeded.seeds)) == 3 and seeded.seeds != other.seeds


def test_mini_batches_follow_the_role_mini_batch_sizes():
    trainer = _trainer("generator.n_samples_per_prompt=2")
    batch = _batch()
    assert trainer.policy.mini_batches(batch) == [[0, 1, 2, 3]]  # 2 prompts x 2 samples
    assert TrainedRole(None, "critic", trainer.cfg).mini_batches(batch) == [[0, 1], [2, 3]]


def test_on_policy_distillation_replaces_the_env_reward_with_the_teacher_gap():
    distill = ["trainer.algorithm.on_policy_distillation=true", "trainer.ref.model.path=teacher"]
    trainer = _trainer(*distill, "trainer.algorithm.use_kl_loss=false", "trainer.algorithm.advantage_estimator=no_op")
    assert trainer.plan.old_logprobs_before_update and trainer.plan.reference == "ref_workers"
    batch = _batch()
    old = torch.tensor([[-1.0, -2.0, -3.0]] * 4)
    teacher = torch.tensor([[-0.5, -2.0, -4.0]] * 4)
    metrics = trainer.apply_distillation_reward(batch, old, teacher)
    # teacher - policy per token, on every row whatever its env reward (row 0 earned 1.0 from the env)
    assert torch.equal(batch.token_rewards, torch.tensor([[0.5, 0.0, -1.0]] * 4))
    assert metrics == pytest.approx(
        {"distillation/teacher_gap_token_mean": -0.5 / 3, "distillation/teacher_gap_sequence_sum": -0.5}
    )
    advantages, _ = trainer.advantages(batch, None)
    assert torch.equal(advantages, batch.token_rewards)  # no_op: the gaps are the advantages
    plain = _trainer()
    assert not plain.plan.old_logprobs_before_update and plain.plan.reference == "ref_workers"  # KL loss (default)
