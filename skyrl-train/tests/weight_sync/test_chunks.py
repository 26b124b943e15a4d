"""Tests of the pure weight-sync helpers: chunk planning by bytes, casting, packing/unpacking, names and registry."""

import pytest
import torch

from skyrl_train.utils.registry import UnknownNameError
from skyrl_train.weight_sync import WeightChunk, make_weight_sync_strategy, resolve_strategy_name
from skyrl_train.weight_sync.chunks import cast_tensors, dtype_from_name, dtype_name, pack, plan_chunks, unpack


def _named(sizes):
    return [(name, torch.zeros(size)) for name, size in sizes]


def _names(chunks):
    return [[name for name, _ in chunk] for chunk in chunks]


def test_plan_chunks_bounds_bytes_after_casting():
    tensors = _named([("a", 2), ("b", 1), ("c", 4), ("d", 1)])
    # float32: a=8, b=4, c=16, d=4 bytes; limit 12: a+b=12 fits, c (16) is alone although too big, then d.
    assert _names(plan_chunks(tensors, 12, torch.float32)) == [["a", "b"], ["c"], ["d"]]
    # bfloat16 halves every size: a=4, b=2 (6), c=8 would make 14 > 12 -> new chunk; c+d = 10 fits.
    assert _names(plan_chunks(tensors, 12, torch.bfloat16)) == [["a", "b"], ["c", "d"]]
    assert _names(plan_chunks(tensors, 10**6, torch.float32)) == [["a", "b", "c", "d"]]
    with pytest.raises(ValueError, match="chunk_bytes must be > 0"):
        plan_chunks(tensors, 0, torch.float32)


def test_cast_rounds_to_the_engine_dtype():
    source = torch.tensor([1.00390625, 1.0078125, 3.0], requires_grad=True)
    [(name, cast)] = cast_tensors([("w", source)], torch.bfloat16, "cpu")
    # bf16 keeps 7 mantissa bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and rounds to even (1.0);
    # 1 + 2^-7 and 3 are exact.
    assert name == "w" and cast.dtype == torch.bfloat16 and not cast.requires_grad
    assert cast.float().tolist() == [1.0, 1.0078125, 3.0]


def test_pack_then_unpack_gives_views_in_order():
    first = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    second = torch.tensor([5.0, 6.0, 7.0])
    buffer = pack([first, second])
    assert buffer.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    unpacked = unpack(buffer, ["first", "second"], [(2, 2), (3,)])
    assert [name for name, _ in unpacked] == ["first", "second"]
    assert unpacked[0][1].tolist() == [[1.0, 2.0], [3.0, 4.0]] and unpacked[1][1].tolist() == [5.0, 6.0, 7.0]
    buffer[4] = 50.0  # views, not copies
    assert unpacked[1][1][0].item() == 50.0
    with pytest.raises(ValueError, match="shapes hold 6 elements but the buffer has 7"):
        unpack(buffer, ["x", "y"], [(2, 2), (2,)])
    with pytest.raises(ValueError, match="one dtype"):
        pack([first, second.to(torch.bfloat16)])


def test_dtype_names_and_chunk_numel():
    assert dtype_name(torch.bfloat16) == "bfloat16" and dtype_from_name("float32") is torch.float32
    with pytest.raises(ValueError, match="'fp99' is not a torch dtype"):
        dtype_from_name("fp99")
    chunk = WeightChunk(version=1, index=0, final=True, names=["a", "b"], shapes=[(2, 3), (4,)], dtype="float32")
    assert chunk.numel == 10  # 2*3 + 4


def test_strategy_names_resolve_and_unknown_names_are_listed():
    assert resolve_strategy_name("auto", colocated=True, device="cpu") == "shm"
    assert resolve_strategy_name("auto", colocated=True, device="cuda") == "cuda_ipc"
    assert resolve_strategy_name("auto", colocated=False, device="cuda") == "broadcast"
    assert resolve_strategy_name("checkpoint", colocated=True, device="cpu") == "checkpoint"
    with pytest.raises(UnknownNameError, match="Did you mean 'broadcast'"):
        make_weight_sync_strategy("brodcast")
    with pytest.raises(ValueError, match="chunk_bytes must be > 0"):
        make_weight_sync_strategy("shm", chunk_bytes=0)
