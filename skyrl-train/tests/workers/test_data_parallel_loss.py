"""Loss reductions normalise over the whole mini-batch across data-parallel ranks: 1 rank and 2 ranks (on Ray, FSDP2
over gloo) give the same gradient for the same mini-batch, even when the ranks' shards hold very different token
counts. Before, each rank divided by its own shard's count and FSDP then averaged the ranks."""

import random

import pytest
import torch

from skyrl_train.generators.types import Trajectory
from skyrl_train.training_batch import TrainingBatch
from skyrl_train.workers import CriticWorker, PolicyWorker, RefWorker, WorkerGroup
from skyrl_train.workers.accounting import reduction_denominator

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPLIT_RANK_CPUS = 0.05
"""Ray CPUs of each rank of the sequence-parallel, reference and critic groups below. The module's fixtures all
live until its end: `groups` takes 3 whole CPUs of the test cluster's 4, and these 12 ranks 0.6 more."""


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


@pytest.fixture(scope="module")
def sequence_parallel_groups(ray_cluster, worker_config):
    """Policy groups whose ranks split each packed sequence in pairs: 2 ranks (one copy of the rows) and 4 ranks (two
    data-parallel pairs), with the settings of `groups`."""
    cfg = worker_config(
        "trainer.algorithm.use_entropy_loss=true",
        "trainer.algorithm.entropy_loss_coef=0.1",
        "trainer.algorithm.max_seq_len=16",
        "trainer.micro_train_batch_size_per_gpu=2",
        "trainer.policy.sequence_parallel_size=2",
    )
    made = {}
    try:
        for world_size in (2, 4):
            # SPLIT_RANK_CPUS each: the module's fixtures all live until its end (see SPLIT_RANK_CPUS)
            made[world_size] = WorkerGroup("policy", PolicyWorker, world_size, cfg, num_cpus_per_worker=SPLIT_RANK_CPUS)
            made[world_size].init_model()
        yield made
    finally:
        for group in made.values():
            group.shutdown()


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("reduction, pass_denominator", [("token_mean", False), ("seq_mean_token_sum_norm", True)])
def test_sequence_parallel_ranks_give_the_one_rank_logprobs_gradient_and_loss(
    groups, sequence_parallel_groups, grpo_advantages, world_size, reduction, pass_denominator
):
    """Pairs of ranks that each run half of every packed sequence (Ulysses) give the log-probs, gradient and loss of
    one rank running it whole: the pair gets the same rows, its gradient parts add up, and its rows count once in
    the mini-batch denominator and in the reported loss."""
    batch = _uneven_batch()
    advantages = grpo_advantages(batch, seed=3)
    split = sequence_parallel_groups[world_size]
    assert split.data_parallel_ranks == [rank // 2 for rank in range(world_size)]
    torch.testing.assert_close(
        split.run_sharded("forward", batch), groups[1].run_sharded("forward", batch), atol=1e-5, rtol=0
    )
    one, loss_one = _gradient(groups[1], reduction, batch, advantages, pass_denominator)
    got, loss_got = _gradient(split, reduction, batch, advantages, pass_denominator)
    assert loss_got == pytest.approx(loss_one, rel=1e-4)
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in one.values()))
    assert norm > 0
    for name, grad in one.items():
        assert torch.allclose(got[name], grad, rtol=1e-3, atol=1e-6 * float(norm)), name


@pytest.fixture(scope="module")
def reference_and_critic(ray_cluster, worker_config):
    """A reference and a critic group, each on 1 rank and on 2 ranks that split every packed sequence."""
    made = {}
    try:
        for role, worker_cls in (("ref", RefWorker), ("critic", CriticWorker)):
            for world_size in (1, 2):
                cfg = worker_config(
                    "trainer.micro_train_batch_size_per_gpu=2", f"trainer.{role}.sequence_parallel_size={world_size}"
                )
                made[role, world_size] = WorkerGroup(
                    role, worker_cls, world_size, cfg, num_cpus_per_worker=SPLIT_RANK_CPUS
                )
                made[role, world_size].init_model()
        yield made
    finally:
        for group in made.values():
            group.shutdown()


def test_reference_and_critic_ranks_that_split_sequences_give_the_one_rank_results(reference_and_critic):
    """`trainer.ref.sequence_parallel_size` and `trainer.critic.sequence_parallel_size`: the reference log-probs,
    the critic's values, its value-loss gradient and reported loss equal one rank's."""
    batch = _uneven_batch()
    roles = reference_and_critic
    torch.testing.assert_close(
        roles["ref", 2].run_sharded("forward", batch), roles["ref", 1].run_sharded("forward", batch), atol=1e-5, rtol=0
    )
    values = roles["critic", 1].run_sharded("forward", batch)
    torch.testing.assert_close(roles["critic", 2].run_sharded("forward", batch), values, atol=1e-5, rtol=0)
    returns = torch.linspace(-1.0, 1.0, values.numel()).view_as(values)
    results = {}
    for world_size in (1, 2):
        group = roles["critic", world_size]
        group.run_all("execute", _drop_gradients)
        metrics = group.run_sharded("forward_backward", batch, returns=returns, old_values=values)
        results[world_size] = (group.run_all("execute", _full_gradients)[0], metrics["critic/value_loss"])
    (one, loss_one), (two, loss_two) = results[1], results[2]
    assert loss_two == pytest.approx(loss_one, rel=1e-4)
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in one.values()))
    assert norm > 0
    for name, grad in one.items():
        assert torch.allclose(two[name], grad, rtol=1e-3, atol=1e-6 * float(norm)), name


@pytest.fixture(scope="module")
def lora_group(ray_cluster, worker_config):
    """A 2-rank LoRA policy that keeps its parameters gathered after forward (`reshard_after_forward=false`)."""
    cfg = worker_config(
        "trainer.policy.model.lora.rank=4",
        "trainer.policy.model.lora.alpha=8",
        "trainer.policy.fsdp.reshard_after_forward=false",
        "trainer.micro_train_batch_size_per_gpu=2",
    )
    group = WorkerGroup("policy", PolicyWorker, 2, cfg, num_cpus_per_worker=SPLIT_RANK_CPUS)
    try:
        group.init_model()
        yield group
    finally:
        group.shutdown()


def test_lora_adapters_keep_their_gradient_after_the_reference_pass_without_resharding(lora_group, grpo_advantages):
    """The LoRA reference log-probs are a no-grad forward of the policy with its adapters off (`forward_base`). With
    the parameters left gathered after it, the next training forward used to leave the adapters without a gradient
    path; `auto` therefore resharded after every forward for LoRA. The reshard after a gradient-free forward
    (`end_gradient_free_forward`) fixes the cause: the adapters' gradient after the pass equals the one before."""
    assert lora_group.run_all("execute", _reshards_after_forward) == [False, False]
    batch = _uneven_batch()
    advantages = grpo_advantages(batch, seed=3)
    before, loss_before = _gradient(lora_group, "token_mean", batch, advantages, False)
    assert before and all("lora_" in name for name in before)
    # B starts at zero, so only the B matrices have a gradient at the first step
    assert all(float(grad.abs().max()) > 0 for name, grad in before.items() if "lora_B" in name)
    lora_group.run_sharded("forward_base", batch)
    after, loss_after = _gradient(lora_group, "token_mean", batch, advantages, False)
    assert loss_after == pytest.approx(loss_before, rel=1e-6)
    assert sorted(after) == sorted(before)
    for name, grad in before.items():
        torch.testing.assert_close(after[name], grad, rtol=1e-5, atol=1e-9, msg=name)
