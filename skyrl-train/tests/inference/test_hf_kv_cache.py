"""`GrowingLayer` holds exactly what transformers' `DynamicLayer` holds through every operation the hf engine's
decoding applies (prefill, decode steps, rows leaving, left padding dropped, rows joining left-padded), writes decode
steps in place instead of copying the cache, and a model decoding over it gives the logits it gives over a
`DynamicCache`."""

import torch
from torch.nn import functional
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from skyrl_train.inference.hf_kv_cache import MIN_SPARE_COLUMNS, GrowingLayer, new_kv_cache
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

HEADS, HEAD_DIM = 2, 4


def states(rows: int, columns: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shape = (rows, HEADS, columns, HEAD_DIM)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


def left_pad(tensor: torch.Tensor, columns: int) -> torch.Tensor:
    return functional.pad(tensor, (0, 0, columns - tensor.shape[-2], 0))


def assert_same(growing: GrowingLayer, reference: DynamicLayer) -> None:
    assert torch.equal(growing.keys, reference.keys) and torch.equal(growing.values, reference.values)


def test_the_layer_holds_what_a_dynamic_layer_holds_through_the_engines_operations():
    growing, reference = GrowingLayer(), DynamicLayer()
    for layer in (growing, reference):
        layer.update(*states(3, 5, seed=0))  # a prefill of 3 rows
    assert_same(growing, reference)
    for step in range(4):  # decode steps
        returned = growing.update(*states(3, 1, seed=10 + step))
        reference.update(*states(3, 1, seed=10 + step))
        assert torch.equal(returned[0], reference.keys) and torch.equal(returned[1], reference.values)
    keep = torch.tensor([0, 2])  # row 1 finished
    growing.batch_select_indices(keep)
    reference.batch_select_indices(keep)
    assert_same(growing, reference)
    growing.drop_left_columns(2)  # left padding no row attends to any more
    reference.keys, reference.values = reference.keys[:, :, 2:], reference.values[:, :, 2:]
    assert_same(growing, reference)
    joining = DynamicLayer()
    joining.update(*states(2, 9, seed=20))  # two rows with a longer prompt join, the batch is left-padded
    columns = max(reference.keys.shape[-2], 9)
    growing.join_left_padded(joining, columns)
    reference.keys = torch.cat([left_pad(reference.keys, columns), left_pad(joining.keys, columns)])
    reference.values = torch.cat([left_pad(reference.values, columns), left_pad(joining.values, columns)])
    assert_same(growing, reference)
    growing.update(*states(4, 1, seed=30))
    reference.update(*states(4, 1, seed=30))
    assert_same(growing, reference)
    assert growing.get_seq_length() == reference.get_seq_length() == columns + 1


def test_decode_steps_write_in_place_and_the_buffer_grows_rarely():
    layer = GrowingLayer()
    layer.update(*states(2, 30, seed=0))
    reallocations, steps = 0, 300
    for step in range(steps):
        before = layer._keys  # held, so a new buffer cannot reuse its memory
        layer.update(*states(2, 1, seed=step))
        reallocations += layer._keys is not before
    # each reallocation leaves at least MIN_SPARE_COLUMNS free columns (DynamicLayer makes a new tensor every step)
    assert 1 <= reallocations <= steps // MIN_SPARE_COLUMNS
    assert layer.get_seq_length() == 30 + steps and layer.capacity >= 30 + steps


def test_transformers_own_assignments_still_work():
    layer = GrowingLayer()
    layer.update(*states(2, 6, seed=0))
    layer.crop(-2)  # transformers' crop assigns `keys` / `values` slices
    assert layer.get_seq_length() == 4
    layer.reset()
    assert not layer.is_initialized and layer.get_seq_length() == 0
    layer.update(*states(1, 3, seed=1))
    assert layer.get_seq_length() == 3


def test_a_model_decodes_the_same_logits_over_either_cache():
    """Same keys and values, same attention kernel: the logits agree to float rounding (the kernel may block a
    strided view of a buffer differently from a contiguous tensor, so summation order may differ: 1e-5 is ~100 ulps
    of these logits, far below any real difference)."""
    model = build_tiny_model(TinyModelSpec(size=2), seed=0).eval()
    ids = torch.randint(3, 60, (3, 12), generator=torch.Generator().manual_seed(0))
    attention = torch.ones_like(ids)
    caches = [DynamicCache(config=model.config), new_kv_cache(model.config)]
    assert all(type(layer) is GrowingLayer for layer in caches[1].layers)
    with torch.inference_mode():
        outputs = [model(input_ids=ids, attention_mask=attention, past_key_values=cache) for cache in caches]
        for step in range(6):
            token = outputs[0].logits[:, -1].argmax(-1, keepdim=True)
            attention = torch.cat([attention, attention.new_ones((3, 1))], dim=1)
            positions = torch.full((3, 1), 12 + step)
            outputs = [
                model(input_ids=token, attention_mask=attention, position_ids=positions, past_key_values=cache)
                for cache in caches
            ]
            torch.testing.assert_close(outputs[1].logits, outputs[0].logits, atol=1e-5, rtol=1e-5)
