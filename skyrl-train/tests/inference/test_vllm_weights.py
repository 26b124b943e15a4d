"""Tests for the HF <-> vLLM parameter bookkeeping (pure torch: runs without vLLM installed)."""

import pytest
import torch

from skyrl_train.inference import vllm_weights
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

ATTENTION = "model.layers.0.self_attn"


def _fuse_like_vllm(state: dict[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """What vLLM holds for a Qwen2 state dict: q/k/v and gate/up concatenated along dim 0 (tensor parallel size 1)."""
    fused, done = [], set()
    for name, tensor in state.items():
        prefix, _, parameter = name.rpartition(".")
        prefix, _, module = prefix.rpartition(".")
        for group, parts in vllm_weights.QWEN_PACKED_MODULES.items():
            if module in parts:
                key = f"{prefix}.{group}.{parameter}"
                if key not in done:
                    fused.append((key, torch.cat([state[f"{prefix}.{p}.{parameter}"] for p in parts], dim=0)))
                    done.add(key)
                break
        else:
            fused.append((name, tensor))
    return fused


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(TinyModelSpec(size=2), seed=0)


@pytest.fixture
def buffer(model):
    vllm_names = [name for name, _ in _fuse_like_vllm(dict(model.named_parameters()))]
    return vllm_weights.ModuleGroupBuffer(vllm_weights.module_groups(vllm_names, vllm_weights.QWEN_PACKED_MODULES))


def test_module_groups_cover_every_part_and_parameter(model):
    vllm_names = [name for name, _ in _fuse_like_vllm(dict(model.named_parameters()))]
    groups = vllm_weights.module_groups(vllm_names, vllm_weights.QWEN_PACKED_MODULES)
    assert groups[f"{ATTENTION}.qkv_proj"] == [
        f"{ATTENTION}.{p}.{k}" for k in ("weight", "bias") for p in ("q_proj", "k_proj", "v_proj")
    ]
    assert groups["model.layers.1.mlp.gate_up_proj"] == [
        "model.layers.1.mlp.gate_proj.weight",
        "model.layers.1.mlp.up_proj.weight",
    ]
    assert groups["model.norm"] == ["model.norm.weight"]
    assert sorted(n for names in groups.values() for n in names) == sorted(dict(model.named_parameters()))


def test_a_module_split_across_chunks_is_released_whole_and_cloned(buffer):
    q, k, v = torch.ones(4, 2), torch.full((2, 2), 2.0), torch.full((2, 2), 3.0)
    ready = buffer.add([(f"{ATTENTION}.q_proj.weight", q), ("model.norm.weight", torch.ones(2)), ("lm_head.weight", k)])
    assert [name for name, _ in ready] == ["model.norm.weight", "lm_head.weight"]  # unknown names pass straight on
    q.zero_()  # a receiver reusing its transfer buffer must not change what was held
    ready = buffer.add([(f"{ATTENTION}.{p}.weight", t) for p, t in (("k_proj", k), ("v_proj", v))])
    assert ready == []
    assert buffer.missing() == [f"{ATTENTION}.{p}.bias" for p in ("k_proj", "q_proj", "v_proj")]
    ready = buffer.add([(f"{ATTENTION}.{p}.bias", torch.zeros(1)) for p in ("v_proj", "q_proj", "k_proj")])
    assert [name for name, _ in ready] == [
        f"{ATTENTION}.{p}.{k}" for k in ("weight", "bias") for p in ("q_proj", "k_proj", "v_proj")
    ]
    assert torch.equal(ready[0][1], torch.ones(4, 2)) and buffer.missing() == []


def test_clear_drops_held_tensors(buffer):
    buffer.add([("model.layers.1.mlp.gate_proj.weight", torch.zeros(1))])
    assert buffer.missing() == ["model.layers.1.mlp.up_proj.weight"]
    buffer.clear()
    assert buffer.missing() == []


def test_unfuse_recovers_every_hf_tensor_of_the_tiny_model(model):
    state = dict(model.state_dict())
    served = vllm_weights.unfuse(
        _fuse_like_vllm(state), vllm_weights.QWEN_PACKED_MODULES, vllm_weights.fused_split_sizes(model.config)
    )
    assert set(served) == set(state)
    for name, tensor in state.items():
        assert torch.equal(served[name], tensor), name


def test_unfuse_skips_repacked_parameters_and_rejects_wrong_sizes(model):
    sizes = vllm_weights.fused_split_sizes(model.config)
    named = [("m.self_attn.qkv_proj.weight", torch.empty(0)), ("m.norm.weight", torch.ones(3))]
    assert list(vllm_weights.unfuse(named, vllm_weights.QWEN_PACKED_MODULES, sizes)) == [
        "m.norm.weight"
    ]  # vLLM CPU kernels repack weights
    with pytest.raises(ValueError, match=r"'m.self_attn.qkv_proj.bias' has 5 rows, expected parts of sizes"):
        vllm_weights.unfuse([("m.self_attn.qkv_proj.bias", torch.ones(5))], vllm_weights.QWEN_PACKED_MODULES, sizes)


def test_vocabulary_rows_vllm_pads_are_cut_before_checksums():
    """vLLM pads embedding and LM-head rows to a multiple of 64; a vocabulary of 100 is served as 128 rows."""
    served = {
        "model.embed_tokens.weight": torch.ones(128, 4),
        "lm_head.weight": torch.ones(128, 4),
        "model.norm.weight": torch.ones(128),  # not a vocabulary parameter: left alone
    }
    trimmed = vllm_weights.unpad_vocab_rows(served, vocab_size=100)
    assert {name: tuple(tensor.shape) for name, tensor in trimmed.items()} == {
        "model.embed_tokens.weight": (100, 4),
        "lm_head.weight": (100, 4),
        "model.norm.weight": (128,),
    }
    assert vllm_weights.unpad_vocab_rows(served, vocab_size=128)["lm_head.weight"].shape[0] == 128
