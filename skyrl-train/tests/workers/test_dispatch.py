"""Sharding a batch over data-parallel ranks with loss-masked padding rows, size-balanced ranges without padding, and
joining the results."""

import pytest
import torch

from skyrl_train.workers.dispatch import balanced_ranges, join_results, pad_batch, padded_size, shard_arguments
from skyrl_train.workers.worker import MiniBatchResult


def test_padded_size_rounds_up_to_a_multiple():
    assert [padded_size(n, 2) for n in (1, 2, 3, 4)] == [2, 2, 4, 4]
    with pytest.raises(ValueError, match="num_shards must be positive"):
        padded_size(3, 0)


def test_pad_batch_appends_loss_masked_copies_of_the_last_row(make_batch):
    batch = make_batch(rows=5)
    padded = pad_batch(batch, 4)
    assert len(padded) == 8
    assert torch.equal(padded.input_ids[5:], batch.input_ids[4:].expand(3, -1))
    assert padded.loss_mask[5:].sum() == 0 and padded.token_rewards[5:].sum() == 0
    assert torch.equal(padded.loss_mask[:5], batch.loss_mask)
    assert padded.uids[5:] == [batch.uids[4] + "#pad"] * 3
    assert batch.loss_mask[4].sum() > 0  # the original batch is untouched
    assert pad_batch(batch, 5) is batch


def test_shard_arguments_splits_rows_and_per_row_tensors(make_batch):
    batch = make_batch(rows=5)
    advantages = torch.arange(5.0)[:, None].expand(5, batch.response_width)
    shards = shard_arguments(batch, 2, {"advantages": advantages, "loss_fn": "regular", "ref_logprobs": None})
    assert [len(shard) for shard, _ in shards] == [3, 3]
    assert torch.equal(shards[0][0].input_ids, batch.input_ids[:3])
    assert shards[0][1]["advantages"][:, 0].tolist() == [0.0, 1.0, 2.0]
    assert shards[1][1]["advantages"][:, 0].tolist() == [3.0, 4.0, 0.0]  # zero row for the padding
    assert shards[1][1]["loss_fn"] == "regular" and shards[1][1]["ref_logprobs"] is None


@pytest.mark.parametrize(
    "sizes,parts,expected",
    [
        ([5, 1, 1, 1, 1, 1], 2, [(0, 1), (1, 6)]),  # 5 | 5 tokens
        ([1, 1, 1, 1, 1], 2, [(0, 3), (3, 5)]),  # the first cut where the running total reaches 2.5
        ([10, 0, 0], 2, [(0, 3)]),  # the all-empty tail joins its neighbour: no rank gets only empty data
        ([0, 0], 2, [(0, 2)]),  # nothing to balance: one range
        ([3], 2, [(0, 1)]),  # fewer items than ranks
        ([2, 2], 8, [(0, 1), (1, 2)]),
        ([], 2, []),
    ],
)
def test_balanced_ranges_balance_sizes_without_padding_and_never_hand_out_empty_data(sizes, parts, expected):
    assert balanced_ranges(sizes, parts) == expected
    with pytest.raises(ValueError, match="num_shards must be >= 1, got 0"):
        balanced_ranges(sizes, 0)


def test_join_results_drops_padding_rows_and_combines_metrics():
    joined = join_results([torch.tensor([[1.0], [2.0]]), torch.tensor([[3.0], [9.0]])], num_rows=3)
    assert joined.tolist() == [[1.0], [2.0], [3.0]]
    assert join_results([{"loss": 1.0}, {"loss": 2.0}], 3) == {"loss": 1.5}
    assert join_results([None, None], 3) is None
    assert join_results([1.5, 2.5], 3) == [1.5, 2.5]


def test_join_results_joins_tuples_field_by_field():
    rank0 = MiniBatchResult(({"loss": 1.0, "ratio_max": 2.0},), torch.tensor([[1.0], [2.0]]))
    rank1 = MiniBatchResult(({"loss": 3.0, "ratio_max": 5.0},), torch.tensor([[3.0], [9.0]]))
    joined = join_results([rank0, rank1], num_rows=3)
    assert isinstance(joined, MiniBatchResult)
    assert joined.steps == ({"loss": 2.0, "ratio_max": 5.0},)  # per-step metrics combined across ranks
    assert joined.old_logprobs.tolist() == [[1.0], [2.0], [3.0]]  # the padding row dropped
    assert join_results([MiniBatchResult(({},)), MiniBatchResult(({},))], 3).old_logprobs is None
    assert join_results([(torch.ones(1), None), (torch.zeros(1), None)], 2)[0].tolist() == [1.0, 0.0]


def test_any_batch_with_select_is_sharded_by_repeating_its_last_row():
    from skyrl_train.workers.reward_worker import ScoringBatch

    batch = ScoringBatch([[1], [2, 2], [3, 3, 3]])
    shards = shard_arguments(batch, 2, {})
    assert [shard.token_ids for shard, _ in shards] == [[[1], [2, 2]], [[3, 3, 3], [3, 3, 3]]]
    assert join_results([torch.tensor([0.1, 0.2]), torch.tensor([0.3, 0.3])], len(batch)).tolist() == pytest.approx(
        [0.1, 0.2, 0.3]
    )


def test_tensor_parallel_ranks_share_a_data_parallel_shard():
    from skyrl_train.workers.dispatch import data_parallel_ranks
    from skyrl_train.workers.group import role_model_parallel_size

    assert data_parallel_ranks(4, 1) == [0, 1, 2, 3]
    assert data_parallel_ranks(4, 2) == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="model_parallel_size=3 must be a positive divisor of 4 ranks"):
        data_parallel_ranks(4, 3)
    megatron = {"trainer": {"strategy": "megatron", "policy": {"megatron": {"tensor_model_parallel_size": 2}}}}
    assert role_model_parallel_size(megatron, "policy") == 2
    assert role_model_parallel_size(megatron, "critic") == 1
    fsdp = {"trainer": {"strategy": "fsdp2", "policy": {"megatron": {"tensor_model_parallel_size": 2}}}}
    assert role_model_parallel_size(fsdp, "policy") == 1


def test_pipeline_stages_of_one_copy_are_a_data_parallel_size_apart_as_in_megatrons_rank_order():
    pytest.importorskip("megatron.core")
    from megatron.core.parallel_state import RankGenerator

    from skyrl_train.workers.dispatch import data_parallel_ranks, representative_ranks
    from skyrl_train.workers.group import role_consecutive_ranks, role_model_parallel_size

    for tp, pp, world in ((1, 2, 4), (2, 2, 8), (2, 3, 12), (1, 4, 4)):
        sizes = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp}
        cfg = {"trainer": {"strategy": "megatron", "policy": {"megatron": sizes}}}
        model_parallel, inner = role_model_parallel_size(cfg, "policy"), role_consecutive_ranks(cfg, "policy")
        assert (model_parallel, inner) == (tp * pp, tp)
        ranks = data_parallel_ranks(world, model_parallel, inner)
        # megatron-core's own data-parallel groups (its default order tp-cp-ep-dp-pp): a group's ranks are the
        # same position in different model copies, so they must get different shards, one each
        generator = RankGenerator(tp=tp, ep=1, dp=world // (tp * pp), pp=pp, cp=1, order="tp-cp-ep-dp-pp")
        for group in generator.get_ranks("dp"):
            assert sorted(ranks[rank] for rank in group) == list(range(world // (tp * pp))), (tp, pp, group)
        # and the ranks of one pipeline (one model copy) share a shard
        for group in generator.get_ranks("pp"):
            assert len({ranks[rank] for rank in group}) == 1, (tp, pp, group)
        assert representative_ranks(ranks) == [copy * tp for copy in range(world // (tp * pp))]
