"""Pipeline stages of a Megatron state dict: the layers each stage builds agree with megatron-core's own count and
offset for even and uneven stages, bad splits are refused naming the keys, and a state dict split into stages and
merged back is the original (tied embeddings included)."""

import pytest
import torch

from skyrl_train.models.megatron_convert import arch_from_hf_config, hf_to_megatron
from skyrl_train.models.megatron_pipeline import (
    EMBEDDING,
    OUTPUT,
    merge_stage_states,
    pipeline_stage_layers,
    stage_state,
)

SPLITS = [
    (8, 2, None, None),
    (8, 4, None, None),
    (7, 3, 1, None),
    (7, 3, None, 3),
    (10, 4, 1, 3),
    (6, 2, 2, 4),
    (3, 2, 1, None),
]


@pytest.mark.parametrize(("layers", "stages", "first", "last"), SPLITS)
def test_stage_layers_agree_with_megatron_core(layers, stages, first, last):
    pytest.importorskip("megatron.core")
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    config = TransformerConfig(
        num_layers=layers,
        hidden_size=16,
        num_attention_heads=2,
        pipeline_model_parallel_size=stages,
        pipeline_dtype=torch.float32,
        num_layers_in_first_pipeline_stage=first,
        num_layers_in_last_pipeline_stage=last,
        moe_token_dispatcher_type="alltoall",
    )
    ranges = pipeline_stage_layers(layers, stages, first, last)
    assert [r.start for r in ranges] == [get_transformer_layer_offset(config, pp_rank=s) for s in range(stages)]
    assert [len(r) for r in ranges] == [get_num_layers_to_build(config, pp_rank=s) for s in range(stages)]
    assert ranges[-1].stop == layers


def test_splits_that_do_not_work_are_refused_naming_the_keys():
    with pytest.raises(ValueError, match=r"7 decoder layers do not split into 2 pipeline stages"):
        pipeline_stage_layers(7, 2)
    with pytest.raises(ValueError, match=r"num_layers_in_\{first,last\}_pipeline_stage"):
        pipeline_stage_layers(9, 4, first=1, last=1)  # 7 layers left for the 2 middle stages
    with pytest.raises(ValueError, match=r"no middle stage"):
        pipeline_stage_layers(8, 2, first=3, last=3)
    with pytest.raises(ValueError, match=r"num_layers_in_first_pipeline_stage must be at least 1"):
        pipeline_stage_layers(8, 2, first=0)
    with pytest.raises(ValueError, match=r"need pipeline_model_parallel_size > 1"):
        pipeline_stage_layers(8, 1, first=2)


def _full_state(tiny_hf_config, **overrides):
    from transformers import AutoModelForCausalLM

    config = tiny_hf_config("qwen2", num_hidden_layers=5, **overrides)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    arch = arch_from_hf_config(config)
    return hf_to_megatron(model.state_dict(), arch, 1), arch


@pytest.mark.parametrize("tied", [False, True])
def test_stage_states_merge_back_to_the_full_state(tiny_hf_config, tied):
    full, arch = _full_state(tiny_hf_config, tie_word_embeddings=tied)
    ranges = pipeline_stage_layers(arch.num_layers, 3, first=1)
    stages = [
        stage_state(full, layers, number == 0, number == len(ranges) - 1, tied) for number, layers in enumerate(ranges)
    ]
    assert EMBEDDING in stages[0] and EMBEDDING not in stages[1] and EMBEDDING not in stages[2]
    assert "decoder.final_layernorm.weight" in stages[2] and "decoder.final_layernorm.weight" not in stages[0]
    assert (OUTPUT in stages[2]) and OUTPUT not in stages[0]
    if tied:
        assert torch.equal(stages[2][OUTPUT], full[EMBEDDING])  # the last stage's copy of the tied embedding
    # each stage numbers its layers from 0: stage 1 holds layers 1 and 2 as 0 and 1
    assert torch.equal(
        stages[1]["decoder.layers.1.mlp.linear_fc2.weight"], full["decoder.layers.2.mlp.linear_fc2.weight"]
    )
    merged = merge_stage_states(list(zip(stages, ranges)), tied)
    assert sorted(merged) == sorted(full)
    for name, tensor in full.items():
        assert torch.equal(merged[name], tensor), name
