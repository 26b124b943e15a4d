"""HF <-> Megatron weight conversion and TP/EP sharding (pure torch, CPU; megatron-core not needed)."""

import pytest
import torch
from transformers import LlamaForCausalLM

from skyrl_train.models.megatron_convert import (
    arch_from_hf_config,
    check_tensor_parallel,
    fuse_qkv,
    gather_state,
    gather_tensor,
    hf_to_megatron,
    megatron_to_hf,
    name_map,
    shard_state,
    shard_tensor,
    split_qkv,
    tp_split_kind,
)
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.recipes.warm_start import WarmStartSettings


def _random_state(config, seed=0):
    """A random HF state dict with the model's names and shapes: every entry distinct, so a swapped tensor shows."""
    with torch.device("meta"):
        from transformers import AutoModelForCausalLM

        skeleton = AutoModelForCausalLM.from_config(config)
    generator = torch.Generator().manual_seed(seed)
    state = {name: torch.randn(tuple(t.shape), generator=generator) for name, t in skeleton.state_dict().items()}
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return state


def _assert_same(actual, expected):
    assert sorted(actual) == sorted(expected)
    for name in expected:
        assert torch.equal(actual[name], expected[name]), name


@pytest.mark.parametrize("architecture", ["qwen2", "qwen3"])
def test_embedded_model_round_trips_bit_exactly(architecture):
    spec = WarmStartSettings().model_spec
    spec = TinyModelSpec(size=spec.size, architecture=architecture, vocab_size=spec.vocab_size)
    model = build_tiny_model(spec, seed=3)
    arch = arch_from_hf_config(model.config)
    assert arch.tied_embeddings and arch.num_query_groups < arch.num_attention_heads
    assert arch.qkv_bias == (architecture == "qwen2") and arch.qk_layernorm == (architecture == "qwen3")
    hf_state = model.state_dict()
    megatron_state = hf_to_megatron(hf_state, arch)
    assert "output_layer.weight" not in megatron_state  # tied: the output layer reuses the embedding
    _assert_same(megatron_to_hf(megatron_state, arch), hf_state)


def test_llama_round_trips_with_untied_head_and_vocab_padding(tiny_hf_config):
    config = tiny_hf_config("llama")
    hf_state = _random_state(config)
    arch = arch_from_hf_config(config)
    megatron_state = hf_to_megatron(hf_state, arch, tensor_parallel_size=2)
    assert megatron_state["embedding.word_embeddings.weight"].shape == (102, 64)
    assert megatron_state["output_layer.weight"].shape == (102, 64)
    assert torch.count_nonzero(megatron_state["output_layer.weight"][101:]) == 0
    assert "decoder.layers.0.self_attention.linear_qkv.bias" not in megatron_state
    _assert_same(megatron_to_hf(megatron_state, arch), hf_state)
    # the same weights really load into the HF model class they claim to be
    LlamaForCausalLM(config).load_state_dict(megatron_to_hf(megatron_state, arch), strict=True)


def test_qkv_fusion_groups_query_heads_with_their_key_value_head(tiny_hf_config):
    config = tiny_hf_config("llama", hidden_size=8, num_attention_heads=4, num_key_value_heads=2, head_dim=2)
    arch = arch_from_hf_config(config)  # 2 groups of 2 query heads, head_dim 2
    q = torch.arange(8.0)[:, None]  # rows: head0 = 0,1; head1 = 2,3; head2 = 4,5; head3 = 6,7
    k = 100 + torch.arange(4.0)[:, None]
    v = 200 + torch.arange(4.0)[:, None]
    fused = fuse_qkv(q, k, v, arch)
    expected = [0, 1, 2, 3, 100, 101, 200, 201, 4, 5, 6, 7, 102, 103, 202, 203]
    assert fused[:, 0].tolist() == expected
    assert [t[:, 0].tolist() for t in split_qkv(fused, arch)] == [q[:, 0].tolist(), k[:, 0].tolist(), v[:, 0].tolist()]


def test_gate_and_up_are_fused_gate_first(tiny_hf_config):
    config = tiny_hf_config("llama")
    hf_state = _random_state(config)
    megatron_state = hf_to_megatron(hf_state, arch_from_hf_config(config))
    fc1 = megatron_state["decoder.layers.1.mlp.linear_fc1.weight"]
    assert torch.equal(fc1[:96], hf_state["model.layers.1.mlp.gate_proj.weight"])
    assert torch.equal(fc1[96:], hf_state["model.layers.1.mlp.up_proj.weight"])


def test_split_kinds_per_parameter(tiny_hf_config):
    kinds = {name: tp_split_kind(name) for name in name_map(arch_from_hf_config(tiny_hf_config("llama")))}
    assert kinds["embedding.word_embeddings.weight"] == "column"
    assert kinds["output_layer.weight"] == "column"
    assert kinds["decoder.layers.0.self_attention.linear_qkv.weight"] == "column"
    assert kinds["decoder.layers.0.self_attention.linear_proj.weight"] == "row"
    assert kinds["decoder.layers.0.mlp.linear_fc1.weight"] == "gated_column"
    assert kinds["decoder.layers.0.mlp.linear_fc2.weight"] == "row"
    assert kinds["decoder.layers.0.input_layernorm.weight"] == "replicated"
    assert kinds["decoder.final_layernorm.weight"] == "replicated"


def test_tp2_shards_have_megatron_partition_shapes_and_gather_back(tiny_hf_config):
    config = tiny_hf_config("qwen2")
    arch = arch_from_hf_config(config)
    full = hf_to_megatron(_random_state(config), arch, tensor_parallel_size=2)
    shards = [shard_state(full, 2, rank) for rank in range(2)]
    qkv = "decoder.layers.0.self_attention.linear_qkv.weight"
    head_dim, groups = arch.head_dim, arch.num_query_groups
    per_group = (arch.num_attention_heads // groups + 2) * head_dim
    assert shards[0][qkv].shape == (per_group * groups // 2, 64)  # one key/value group per rank
    assert torch.equal(shards[1][qkv], full[qkv][per_group:])
    assert shards[0]["decoder.layers.0.self_attention.linear_qkv.bias"].shape == (per_group,)
    assert shards[0]["decoder.layers.0.self_attention.linear_proj.weight"].shape == (64, 32)
    fc1 = shards[1]["decoder.layers.0.mlp.linear_fc1.weight"]  # [gate half 2; up half 2]
    assert torch.equal(fc1[:48], full["decoder.layers.0.mlp.linear_fc1.weight"][48:96])
    assert torch.equal(fc1[48:], full["decoder.layers.0.mlp.linear_fc1.weight"][144:])
    assert shards[0]["decoder.layers.0.mlp.linear_fc2.weight"].shape == (64, 48)
    assert shards[0]["embedding.word_embeddings.weight"].shape == (51, 64)
    assert torch.equal(shards[0]["decoder.final_layernorm.weight"], full["decoder.final_layernorm.weight"])
    _assert_same(gather_state([shards]), full)


@pytest.mark.parametrize("kind_name", ["x.linear_qkv.weight", "x.linear_fc1.weight", "x.linear_fc2.weight"])
def test_shard_then_gather_is_identity_for_four_ranks(kind_name):
    tensor = torch.randn(16, 8)
    assert torch.equal(gather_tensor(kind_name, [shard_tensor(kind_name, tensor, 4, r) for r in range(4)]), tensor)


def test_tensor_parallel_size_must_divide_heads_naming_the_key(tiny_hf_config):
    arch = arch_from_hf_config(tiny_hf_config("llama"))
    check_tensor_parallel(arch, 2)
    with pytest.raises(ValueError, match=r"tensor_model_parallel_size=4 does not divide the model's num_key_value"):
        check_tensor_parallel(arch, 4)


def test_llama_biases_outside_qkv_are_refused(tiny_hf_config):
    with pytest.raises(ValueError, match="attention_bias/mlp_bias"):
        arch_from_hf_config(tiny_hf_config("llama", attention_bias=True))


def test_unsupported_model_type_is_refused_by_name(tiny_hf_config):
    config = tiny_hf_config("llama")
    config.model_type = "gpt2"
    with pytest.raises(ValueError, match="model_type='gpt2' has no Megatron weight mapping"):
        arch_from_hf_config(config)


def test_missing_and_unexpected_tensors_are_named(tiny_hf_config):
    config = tiny_hf_config("llama")
    arch = arch_from_hf_config(config)
    state = _random_state(config)
    extra = dict(state, **{"model.layers.0.mlp.extra.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="model.layers.0.mlp.extra.weight"):
        hf_to_megatron(extra, arch)
    del state["model.layers.1.self_attn.k_proj.weight"]
    with pytest.raises(KeyError, match="model.layers.1.self_attn.k_proj.weight"):
        hf_to_megatron(state, arch)


MOE_TYPES = ["mixtral", "qwen2_moe", "qwen3_moe"]


def _moe_state(config):
    return arch_from_hf_config(config), _random_state(config)


@pytest.mark.parametrize("model_type", MOE_TYPES)
def test_moe_round_trips_and_shards_over_experts(model_type, tiny_hf_config):
    arch, hf_state = _moe_state(tiny_hf_config(model_type))
    assert arch.num_experts == 4 and arch.moe_router_topk == 2
    full = hf_to_megatron(hf_state, arch)
    assert full["decoder.layers.0.mlp.router.weight"].shape == (4, 32)
    assert full["decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"].shape == (32, 32)
    if model_type == "qwen2_moe":
        assert full["decoder.layers.0.mlp.shared_experts.linear_fc1.weight"].shape == (48, 32)
        assert full["decoder.layers.0.mlp.shared_experts.gate_weight"].shape == (1, 32)
    experts = hf_state["model.layers.1.mlp.experts.gate_up_proj"]
    assert torch.equal(full["decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"], experts[3])
    _assert_same(megatron_to_hf(full, arch), hf_state)
    # ep=2 x tp=2: each EP rank holds experts renumbered from 0, TP-split like dense MLPs
    shards = [[shard_state(full, 2, tp, 2, ep) for tp in range(2)] for ep in range(2)]
    local = shards[1][0]
    assert "decoder.layers.0.mlp.experts.local_experts.2.linear_fc1.weight" not in local
    assert torch.equal(
        local["decoder.layers.0.mlp.experts.local_experts.0.linear_fc2.weight"],
        full["decoder.layers.0.mlp.experts.local_experts.2.linear_fc2.weight"][:, :8],
    )
    _assert_same(gather_state(shards), full)
