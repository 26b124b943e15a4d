"""The trainer step's contracts, checked on its phases without Ray: which rows and tokens the advantage statistics
see, KL in the reward and what the KL controller is fed, batch-normalised advantages, the mini-batch loss
denominator, and the driver state a checkpoint keeps."""

import pytest
import torch

from skyrl_train.algorithms import AdaptiveKLController, kl_estimate
from skyrl_train.config import SkyRLConfig
from skyrl_train.trainer import RayPPOTrainer
from skyrl_train.training_batch import TrainingBatch


def _trainer(*overrides: str) -> RayPPOTrainer:
    cfg = SkyRLConfig.from_cli_overrides(list(overrides), validate=False)
    parts = dict.fromkeys(
        ["tokenizer", "train_loader", "policy", "ref", "critic", "client", "generator", "weight_sync", "tracker"]
    )
    return RayPPOTrainer(cfg, eval_items=[], **parts)


def test_group_statistics_count_filtered_rows_and_skip_failed_ones(make_trajectory):
    trainer = _trainer("trainer.algorithm.advantage_estimator=grpo", "trainer.algorithm.grpo_norm_by_std=false")
    batch = TrainingBatch.from_trajectories(
        [
            make_trajectory("g", 1.0, filtered="overlong"),  # truncated: not trained on, but its reward is real
            make_trajectory("g", 0.0),
            make_trajectory("g", 0.0, env_error={"kind": "exception", "reason": "grader crashed"}),  # no real reward
        ],
        pad_token_id=0,
    )
    advantages, _ = trainer.advantages(batch, values=None)
    # group mean over the two valid rows is 0.5 (the failed row is left out; the filtered one counts)
    assert advantages[0].tolist() == pytest.approx([0.5, 0.5])
    assert advantages[1].tolist() == pytest.approx([-0.5, -0.5])
    assert advantages[2].tolist() == [0.0, 0.0]


def test_batch_normalised_advantages_are_z_scored_over_trained_tokens(make_trajectory):
    trajectories = [
        make_trajectory("a", 1.0),
        make_trajectory("a", 0.0, 3),
        make_trajectory("b", 1.0),
        make_trajectory("b", 1.0),
    ]
    plain, _ = _trainer().advantages(TrainingBatch.from_trajectories(trajectories, 0), None)
    batch = TrainingBatch.from_trajectories(trajectories, 0)
    normalised, _ = _trainer("trainer.algorithm.advantage_batch_normalize=true").advantages(batch, None)
    tokens = normalised[batch.loss_mask.bool()]
    assert float(tokens.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(tokens.var(unbiased=False)) == pytest.approx(1.0, rel=1e-4)
    assert not torch.allclose(plain, normalised)


def test_kl_in_reward_penalises_tokens_and_feeds_the_controller_sequence_sums(make_trajectory):
    trainer = _trainer(
        "trainer.algorithm.use_kl_loss=false",
        "trainer.algorithm.use_kl_in_reward=true",
        "trainer.algorithm.kl_ctrl.type=adaptive",
        "trainer.algorithm.kl_ctrl.kl_coef=0.1",
        "trainer.algorithm.kl_ctrl.kl_target=0.05",
        "trainer.algorithm.kl_ctrl.horizon=10",
        "trainer.algorithm.kl_estimator_type=k1",
    )
    batch = TrainingBatch.from_trajectories(
        [make_trajectory("a", 1.0, 2), make_trajectory("a", 0.0, 4)], pad_token_id=0
    )
    old = torch.tensor([[-1.0, -1.0, 0.0, 0.0], [-1.0, -1.0, -1.0, -1.0]])
    ref = old - 0.1 * batch.response_mask  # k1 = 0.1 on every generated token
    metrics = trainer.apply_kl_in_reward(batch, old, ref)
    assert batch.token_rewards[0].tolist() == pytest.approx([-0.01, 0.99, 0.0, 0.0])
    assert batch.token_rewards[1].tolist() == pytest.approx([-0.01] * 4)
    # per-sequence KL sums are 0.2 and 0.4: the controller sees their mean 0.3, not the token mean 0.1
    expected = AdaptiveKLController(0.1, 0.05, 10)
    expected.update(0.3, n_steps=2)
    assert trainer.kl_controller.value == pytest.approx(expected.value)
    assert metrics["reward/kl_sequence_sum"] == pytest.approx(0.3)
    assert metrics["reward/kl_token_mean"] == pytest.approx(0.1)
    assert metrics["reward/kl_penalty_coef"] == pytest.approx(0.1)  # the coefficient this step used
    assert float(kl_estimate(old, ref, "k1", batch.response_mask).sum()) == pytest.approx(0.6)


def test_loss_denominator_is_the_whole_mini_batch():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert _trainer().policy.loss_denominator(mask) == 6.0  # token_mean: every valid token of the mini-batch
    assert _trainer("trainer.algorithm.loss_reduction=sequence_mean").policy.loss_denominator(mask) == 3.0
    dr_grpo = _trainer("trainer.algorithm.loss_reduction=seq_mean_token_sum_norm", "trainer.algorithm.max_seq_len=8")
    assert dr_grpo.policy.loss_denominator(mask) == 3.0  # rows (each row's token sum is divided by max_seq_len itself)


def test_driver_state_round_trips_through_a_checkpoint_dict():
    overrides = ["trainer.algorithm.use_kl_loss=false", "trainer.algorithm.use_kl_in_reward=true"]
    trainer = _trainer(*overrides, "trainer.algorithm.kl_ctrl.type=adaptive")
    trainer.kl_controller.value = 0.0421
    trainer.initial_eval = {"eval/all/pass_at_1": 0.25}
    trainer.sampled_groups_total = 96
    fresh = _trainer(*overrides, "trainer.algorithm.kl_ctrl.type=adaptive")
    trainer.prompts.restore([{"uid": "q"}])  # drawn, not trained yet
    fresh.restore_state(trainer.state())
    assert fresh.kl_controller.value == 0.0421 and fresh.prompts.state() == [{"uid": "q"}]
    assert fresh.initial_eval == {"eval/all/pass_at_1": 0.25} and fresh.sampled_groups_total == 96


def test_rounds_of_one_step_get_their_own_seeds_and_uids():
    trainer = _trainer("generator.sampling_params.seed=5", "generator.n_samples_per_prompt=2")
    items = [{"uid": "p", "prompt": [{"role": "user", "content": "x"}], "env_class": "t", "env_extras": {}}]
    make_input = trainer.source.batches.for_step(3)
    first, second = make_input(items, 0), make_input(items, 1)
    assert first.uids == ["3/p", "3/p"] and second.uids == ["3.1/p", "3.1/p"]
    assert len(set(first.seeds + second.seeds)) == 4
