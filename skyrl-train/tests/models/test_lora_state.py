"""Adapter tensors by name: parsing peft names, merging adapters into base weights (as peft does), and the hf
engine's `AdapterMerger` taking an adapter-only sync split across chunks."""

import asyncio

import pytest
import torch

from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.models.lora import LoRASettings, apply_lora
from skyrl_train.models.lora_state import (
    AdapterMerger,
    base_model_name,
    merge_peft_state,
    parse_adapter_name,
    unnamed_adapter_key,
)
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer

IDS = torch.tensor([[3, 50, 51, 52, 4, 9, 10]])


def test_names_map_between_peft_and_the_base_model():
    name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"
    parsed = parse_adapter_name(name)
    assert (parsed.module, parsed.part, parsed.adapter) == ("model.layers.0.self_attn.q_proj", "A", "default")
    assert unnamed_adapter_key(name) == "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    assert parse_adapter_name("model.layers.0.self_attn.q_proj.weight") is None
    assert base_model_name("base_model.model.model.layers.0.mlp.up_proj.base_layer.weight") == (
        "model.layers.0.mlp.up_proj.weight"
    )
    with pytest.raises(ValueError, match="is not a LoRA adapter parameter name"):
        unnamed_adapter_key("model.embed_tokens.weight")


def test_merge_matches_peft_merge_and_unload(adapted_tiny_model):
    model = adapted_tiny_model()
    expected = model(IDS).logits
    merged_state = merge_peft_state(model.state_dict(), alpha=8)
    plain = build_tiny_model(TinyModelSpec(size=2), seed=5)
    plain.load_state_dict(merged_state)
    assert torch.allclose(plain.eval()(IDS).logits, expected, atol=1e-5)
    reference = model.merge_and_unload().state_dict()
    for name, tensor in reference.items():
        assert torch.allclose(merged_state[name], tensor, atol=1e-6), name


def test_hf_engine_merges_an_adapter_only_sync_split_across_chunks(adapted_tiny_model):
    adapted = adapted_tiny_model(seed=2)
    expected = adapted(IDS).logits
    engine = HFInferenceEngine(build_tiny_model(TinyModelSpec(size=2), seed=0), build_char_tokenizer(), lora_alpha=8)
    adapter = [(name, param.detach()) for name, param in adapted.named_parameters() if "lora_" in name]
    first, second = adapter[:3], adapter[3:]  # the first chunk ends between a module's lora_A and lora_B
    asyncio.run(engine.update_weights(first, version=0))
    assert engine.adapter_merger.incomplete == ["model.layers.0.self_attn.k_proj"]
    asyncio.run(engine.update_weights(second, version=1))
    assert engine.weight_version == 1 and not engine.adapter_merger.incomplete
    assert torch.allclose(engine.model(IDS).logits, expected, atol=1e-5)
    # A second sync merges into the base weights again, not on top of the first adapter.
    again = adapted_tiny_model(seed=3)
    asyncio.run(engine.update_weights([(n, p.detach()) for n, p in again.named_parameters() if "lora_" in n], 2))
    assert torch.allclose(engine.model(IDS).logits, again(IDS).logits, atol=1e-5)
    checksums = asyncio.run(engine.weights_checksum())
    assert set(name for name, _ in adapter) <= set(checksums)


def test_engines_without_lora_refuse_adapter_tensors():
    engine = HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=0), build_char_tokenizer())
    adapted = apply_lora(build_tiny_model(TinyModelSpec(size=1), seed=0), LoRASettings(rank=2))
    adapter = [(n, p.detach()) for n, p in adapted.named_parameters() if "lora_" in n]
    with pytest.raises(ValueError, match="built without LoRA"):
        asyncio.run(engine.update_weights(adapter, version=1))


def test_merger_names_a_module_the_engine_lacks():
    merger = AdapterMerger(alpha=8)
    with pytest.raises(ValueError, match="which the engine's model lacks"):
        merger.add([("base_model.model.model.nope.lora_A.default.weight", torch.zeros(2, 4))], {})
