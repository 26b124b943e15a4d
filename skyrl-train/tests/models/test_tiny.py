"""Tests for the tiny model builder: the size dial, determinism, architectures and HF save/load."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model


def _params(model):
    return sum(p.numel() for p in model.parameters())


def test_size_dial_sets_shape_and_parameter_count_grows():
    counts = [_params(build_tiny_model(TinyModelSpec(size=s))) for s in (1, 2, 3, 4)]
    assert counts == sorted(counts) and len(set(counts)) == 4
    config = build_tiny_model(TinyModelSpec(size=3)).config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (192, 3, 6)
    assert config.hidden_size // config.num_attention_heads == 32  # a head_dim vLLM's CPU backend accepts
    assert 1_000_000 < counts[2] < 2_000_000


def test_same_seed_same_weights_and_global_rng_untouched():
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = build_tiny_model(TinyModelSpec(size=2), seed=7)
    assert torch.equal(torch.rand(1), expected_next)
    b = build_tiny_model(TinyModelSpec(size=2), seed=7)
    c = build_tiny_model(TinyModelSpec(size=2), seed=8)
    a_params, b_params, c_params = (list(m.parameters()) for m in (a, b, c))
    assert all(torch.equal(x, y) for x, y in zip(a_params, b_params))
    assert not all(torch.equal(x, z) for x, z in zip(a_params, c_params))


@pytest.mark.parametrize("architecture", ["qwen2", "qwen3"])
def test_forward_and_save_reload_give_identical_logits(tmp_path, architecture):
    model = build_tiny_model(TinyModelSpec(size=2, architecture=architecture)).eval()
    ids = torch.tensor([[3, 10, 20, 30, 4]])
    logits = model(ids).logits
    assert logits.shape == (1, 5, 128)
    model.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True).eval()
    assert torch.allclose(again(ids).logits, logits)


def test_bad_spec_values_are_rejected():
    with pytest.raises(ValueError, match="size must be >= 1, got 0"):
        TinyModelSpec(size=0)
    with pytest.raises(ValueError, match="architecture must be 'qwen2' or 'qwen3'"):
        TinyModelSpec(architecture="llama")
