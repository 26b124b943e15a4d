"""Loss reductions on a hand-computed batch, including an all-masked row and a micro-batch denominator."""

import pytest
import torch

from skyrl_train.algorithms import LOSS_REDUCTIONS, reduce_loss

NAN = float("nan")
# row 0: [1, 2, 3] all valid ; row 1: [4] then padding ; row 2: nothing valid
VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, NAN, NAN], [NAN, 7.0, 7.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])


def test_token_mean_divides_by_valid_tokens():
    assert reduce_loss("token_mean", VALUES, MASK).item() == 2.5  # 10 / 4
    assert reduce_loss("token_mean", VALUES, MASK, denominator=8).item() == 1.25  # 10 / 8 (global count)


def test_sequence_mean_averages_sequences_with_a_valid_token():
    # per-sequence means 2 and 4; the empty row is left out -> 3
    assert reduce_loss("sequence_mean", VALUES, MASK).item() == 3.0
    assert reduce_loss("sequence_mean", VALUES, MASK, denominator=4).item() == 1.5  # (2 + 4) / 4


def test_seq_mean_token_sum_norm_uses_the_fixed_length_and_all_rows():
    # sums 6 and 4 (and 0) divided by max_seq_len 4 -> 1.5, 1, 0 ; mean over 3 rows = 0.833333
    assert reduce_loss("seq_mean_token_sum_norm", VALUES, MASK, max_seq_len=4).item() == pytest.approx(2.5 / 3)
    with pytest.raises(ValueError, match="needs max_seq_len"):
        reduce_loss("seq_mean_token_sum_norm", VALUES, MASK)


def test_token_sum_and_registry():
    assert reduce_loss("token_sum", VALUES, MASK).item() == 10.0
    assert LOSS_REDUCTIONS.names() == ["seq_mean_token_sum_norm", "sequence_mean", "token_mean", "token_sum"]


def test_shape_mismatch_is_rejected():
    with pytest.raises(ValueError, match=r"must both be \[batch, response_len\]"):
        reduce_loss("token_mean", VALUES, MASK[:, :2])
