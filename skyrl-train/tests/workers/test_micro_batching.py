"""Micro-batch grouping (by count and token budget), count balancing, and padding-column trimming."""

import pytest
import torch

from skyrl_train.generators.types import Trajectory
from skyrl_train.training_batch import TrainingBatch
from skyrl_train.workers.micro_batching import (
    balance_group_counts,
    fixed_size_groups,
    micro_batch_groups,
    packed_token_groups,
    pad_response_columns,
    row_lengths,
    token_budget_groups,
    trim_padding_columns,
)


def _traj(prompt, response):
    return Trajectory(
        uid="u",
        env_class="t",
        prompt_token_ids=prompt,
        response_ids=response,
        loss_mask=[1] * len(response),
        token_rewards=[0.0] * len(response),
        rollout_logprobs=[-1.0] * len(response),
        stop_reason="stop",
        num_turns=1,
        weight_version=0,
    )


@pytest.fixture
def three_rows():
    # prompt_width 3, response_width 2:
    # row 0: [0 7 8 | 9 0]   row 1: [5 6 7 | 1 2]   row 2: [0 3 4 | 0 0] (empty response keeps one masked column)
    return TrainingBatch.from_trajectories([_traj([7, 8], [9]), _traj([5, 6, 7], [1, 2]), _traj([3, 4], [])], 0)


def test_row_lengths_count_prompt_and_response_tokens(three_rows):
    assert row_lengths(three_rows) == ([2, 3, 2], [1, 2, 0])


def test_fixed_size_groups_are_consecutive_with_a_short_tail():
    assert fixed_size_groups(5, 2) == [[0, 1], [2, 3], [4]]
    assert fixed_size_groups(4, 8) == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="positive number of sequences, got 0"):
        fixed_size_groups(4, 0)


def test_token_budget_groups_by_hand():
    # totals 3, 5, 2, 8; longest first: row 3 alone (2 rows * (5+3) = 16 > 10), then rows 1 and 0 share
    # 2 * (3 + 2) = 10 <= 10, then row 2 would make 3 * 5 = 15 > 10 and opens a new group.
    groups = token_budget_groups([2, 3, 2, 5], [1, 2, 0, 3], max_tokens=10)
    assert groups == [[3], [0, 1], [2]]
    # A row over budget on its own still gets a group.
    assert token_budget_groups([5], [3], max_tokens=4) == [[0]]
    with pytest.raises(ValueError, match="max_tokens_per_microbatch must be > 0"):
        token_budget_groups([1], [1], max_tokens=0)


def test_micro_batch_groups_switches_on_token_budget(three_rows):
    assert micro_batch_groups(three_rows, micro_batch_size=2, max_tokens_per_microbatch=-1) == [[0, 1], [2]]
    # totals 5, 3, 2 (rows 1, 0, 2): row 1 opens a group; adding row 0 costs 2 * (3 + 2) = 10 > 8, so row 0 opens
    # the next; adding row 2 costs 2 * (2 + 1) = 6 <= 8, so it joins row 0.
    assert micro_batch_groups(three_rows, micro_batch_size=2, max_tokens_per_microbatch=8) == [[1], [0, 2]]


def test_packed_token_groups_count_the_tokens_a_packed_forward_runs():
    # (prompt, response, prompt key): a response costs all its tokens but the last, a prompt counts once per group.
    # Row costs: 3 + 4 = 7; 0 + 1 (row 0's prompt) = 1; 4 + 0 = 4; 2 + 8 = 10.
    rows = ([3, 3, 4, 2], [5, 2, 1, 9], [0, 0, 1, 2])
    assert packed_token_groups(*rows, max_tokens=12) == [[0, 1, 2], [3]]  # 7 + 1 + 4 = 12 fits, + 10 does not
    # With 7 tokens row 1 opens a group, where its prompt is no longer packed: it costs 3 + 1 there.
    assert packed_token_groups(*rows, max_tokens=7) == [[0], [1], [2], [3]]
    assert packed_token_groups(*rows, max_tokens=8) == [[0, 1], [2], [3]]
    with pytest.raises(ValueError, match="max_tokens_per_microbatch must be > 0"):
        packed_token_groups(*rows, max_tokens=0)
    with pytest.raises(ValueError, match="expected one of each per row"):
        packed_token_groups([1], [1, 2], [0], max_tokens=4)


def test_micro_batch_groups_count_packed_tokens_when_packing():
    def uid(name, prompt, response):
        row = _traj(prompt, response)
        row.uid = name
        return row

    # prompts (2, 3, 3 tokens; rows 1 and 2 share one), responses 6, 5, 5 tokens: padded, a group costs
    # rows x (3 + 6); packed, row costs 2 + 5, 3 + 4 and (shared) 4, or 3 + 4 when prompts are not shared.
    batch = TrainingBatch.from_trajectories(
        [uid("a", [7, 8], [1] * 6), uid("b", [5, 6, 7], [2] * 5), uid("b", [5, 6, 7], [3] * 5)], 0
    )
    assert micro_batch_groups(batch, 1, max_tokens_per_microbatch=18) == [[0, 1], [2]]
    assert micro_batch_groups(batch, 1, max_tokens_per_microbatch=18, packed=True) == [[0, 1], [2]]
    assert micro_batch_groups(batch, 1, 18, packed=True, share_prompts=True) == [[0, 1, 2]]  # 7 + 7 + 4


def test_balance_group_counts_splits_the_largest_then_adds_dummies():
    assert balance_group_counts([[0, 1, 2], [3]], 4) == [[0], [1], [2], [3]]
    assert balance_group_counts([[0]], 3) == [[0], [], []]
    assert balance_group_counts([[0], [1]], 2) == [[0], [1]]
    with pytest.raises(ValueError, match="cannot shrink 2 micro-batches to 1"):
        balance_group_counts([[0], [1]], 1)


def test_trim_drops_all_padding_columns_of_a_micro_batch(three_rows):
    trimmed = trim_padding_columns(three_rows.select([0, 2]))
    # Rows 0 and 2 both have 2 prompt tokens and at most 1 response token: columns 1..3 of 0..4 remain.
    assert trimmed.batch.prompt_width == 2 and trimmed.response_width == 1
    assert trimmed.batch.input_ids.tolist() == [[7, 8, 9], [3, 4, 0]]
    assert trimmed.batch.attention_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert trimmed.batch.position_ids.tolist() == [[0, 1, 2], [0, 1, 1]]
    assert trimmed.batch.loss_mask.tolist() == [[1.0], [0.0]]
    assert trimmed.batch.rollout_logprobs.tolist() == [[-1.0], [0.0]]
    assert trimmed.slice_response(torch.tensor([[1.0, 2.0], [3.0, 4.0]])).tolist() == [[1.0], [3.0]]
    assert trimmed.slice_response(None) is None


def test_trim_keeps_everything_when_nothing_is_all_padding(three_rows):
    trimmed = trim_padding_columns(three_rows)
    assert trimmed.batch.prompt_width == 3 and trimmed.response_width == 2
    assert torch.equal(trimmed.batch.input_ids, three_rows.input_ids)


def test_pad_response_columns_restores_the_width():
    padded = pad_response_columns(torch.tensor([[1.0], [2.0]]), 3)
    assert padded.tolist() == [[1.0, 0.0, 0.0], [2.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="more than the batch's 1"):
        pad_response_columns(torch.zeros(1, 2), 1)
