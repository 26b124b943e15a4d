"""Loss reductions normalise over the whole mini-batch across data-parallel ranks: 1 rank and 2 ranks (on Ray, FSDP2
over gloo) give the same gradient for the same mini-batch, even when the ranks' shards hold very different token
counts. Before, each rank divided by its own shard's count and FSDP then averaged the ranks."""

import random

import pytest
import torch

from skyrl_train.generators.types import Trajectory
from skyrl_train.training_batch import TrainingBatch
from skyrl_train.workers import PolicyWorker, WorkerGroup
from skyrl_train.workers.accounting import reduction_denominator

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _uneven_batch(rows: int = 8) -> TrainingBatch:
    """`rows` rows (default 8): the first 4 (rank 0's shard of 2) have 12-token responses, the rest 1-2 tokens."""
    rng = random.Random(7)
    trajectories = []
    for row in range(rows):
        length = 12 if row < 4 else rng.randint(1, 2)
        trajectories.append(
            Trajectory(
                uid=str(row // 2),
                env_class="t",
                prompt_token_ids=[rng.randrange(5, 60) for _ in range(4)],
                response_ids=[rng.randrange(5, 60) for _ in range(length)],
                loss_mask=[1] * length,
                token_rewards=[0.0] * length,
                rollout_logprobs=[-3.0] * length,
                stop_reason="stop",
                num_turns=1,
                weight_version=0,
            )
        )
    return TrainingBatch.from_trajectories(trajectories, pad_token_id=0)


def _full_gradients(worker) -> dict:
    return {n: p.grad.full_tensor().clone() for n, p in worker.model.named_parameters() if p.grad is not None}


def _drop_gradients(worker) -> None:
    worker.model.zero_grad(set_to_none=True)


@pytest.fixture(scope="module")
def groups(ray_cluster, worker_config):
    """A 1-rank and a 2-rank policy group, shared by every reduction (each call passes its own `loss_reduction`)."""
    cfg = worker_config(
        # an entropy bonus: a term that does not vanish with the advantages (padding rows get advantage 0), so only
        # their loss mask keeps them out
        "trainer.algorithm.use_entropy_loss=true",
        "trainer.algorithm.entropy_loss_coef=0.1",
        "trainer.algorithm.max_seq_len=16",
        "trainer.micro_train_batch_size_per_gpu=2",
    )
    made = {}
    try:
        for world_size in (1, 2):
            made[world_size] = WorkerGroup("policy", PolicyWorker, world_size, cfg)
            made[world_size].init_model()
        yield made
    finally:
        for group in made.values():
            group.shutdown()


def _gradient(group, reduction, batch, advantages, pass_denominator):
    group.run_all("execute", _drop_gradients)
    extra = {"loss_fn_config": {"loss_reduction": reduction}}
    if pass_denominator:
        extra["loss_denominator"] = reduction_denominator(reduction, batch.loss_mask, 16)
    old = batch.rollout_logprobs + 0.05 * batch.response_mask
    metrics = group.run_sharded("forward_backward", batch, advantages=advantages, old_logprobs=old, **extra)
    return group.run_all("execute", _full_gradients)[0], metrics["policy/loss"]


@pytest.mark.parametrize(
    "reduction, pass_denominator",
    [("token_mean", False), ("token_mean", True), ("sequence_mean", False), ("seq_mean_token_sum_norm", True)],
)
def test_one_and_two_ranks_give_the_same_gradient(groups, grpo_advantages, reduction, pass_denominator):
    batch = _uneven_batch()
    advantages = grpo_advantages(batch, seed=3)
    one, loss_one = _gradient(groups[1], reduction, batch, advantages, pass_denominator)
    two, loss_two = _gradient(groups[2], reduction, batch, advantages, pass_denominator)
    # float32 sums in another order (and gloo's reduce-scatter): agreement to ~1e-6 relative
    assert loss_two == pytest.approx(loss_one, rel=1e-4)
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in one.values()))
    assert norm > 0
    for name, grad in one.items():
        assert torch.allclose(two[name], grad, rtol=1e-3, atol=1e-6 * float(norm)), name


@pytest.mark.parametrize("reduction", ["token_mean", "sequence_mean", "seq_mean_token_sum_norm"])
def test_a_mini_batch_that_does_not_split_evenly_is_padded_without_changing_the_gradient(
    groups, grpo_advantages, reduction
):
    """5 rows over 2 ranks with micro-batches of 2, as SkyRL pads them: the shards are evened out to 3 + 3 rows with
    a loss-masked copy, so rank 1's second micro-batch is that padding row alone. The gradient and loss equal one
    rank's over the 5 rows as they are (no padding row), with the denominator of the unpadded mini-batch, which is
    what the trainer passes (`TrainedRole.train`)."""
    batch = _uneven_batch(rows=5)
    advantages = grpo_advantages(batch, seed=5)
    one, loss_one = _gradient(groups[1], reduction, batch, advantages, pass_denominator=True)
    two, loss_two = _gradient(groups[2], reduction, batch, advantages, pass_denominator=True)
    assert loss_two == pytest.approx(loss_one, rel=1e-4)
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in one.values()))
    assert norm > 0
    for name, grad in one.items():
        assert torch.allclose(two[name], grad, rtol=1e-3, atol=1e-6 * float(norm)), name


def _reshards_after_forward(worker) -> bool:
    return bool(worker.strategy.fsdp.reshard_after_forward)


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_log_prob_pass_before_training_leaves_the_gradient_unchanged(groups, grpo_advantages, world_size):
    """A `forward` (no gradient) between two identical `forward_backward` calls: the gradient after it equals the
    one before. With parameters left unsharded by that forward (`reshard_after_forward=false`, the CPU default),
    FSDP2 used to double the next backward's gradient, so the first mini-batch trained after an old-log-prob pass
    counted twice."""
    group = groups[world_size]
    assert group.run_all("execute", _reshards_after_forward) == [False] * world_size  # the case that doubled
    batch = _uneven_batch()
    advantages = grpo_advantages(batch, seed=3)
    before, loss_before = _gradient(group, "token_mean", batch, advantages, False)
    group.run_sharded("forward", batch)
    after, loss_after = _gradient(group, "token_mean", batch, advantages, False)
    assert loss_after == pytest.approx(loss_before, rel=1e-6)
    for name, grad in before.items():
        torch.testing.assert_close(after[name], grad, rtol=1e-5, atol=1e-9, msg=name)
