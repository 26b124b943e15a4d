"""Tests for model loading and LoRA: wrap, train only adapters, merge, export and reload."""

import pytest
import torch

from skyrl_train.models.loading import load_causal_lm, load_tokenizer, resolve_dtype
from skyrl_train.models.lora import LoRASettings, apply_lora, export_merged, tied_embedding_modules
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer


def test_lora_trains_only_adapters_and_merged_export_matches(tmp_path):
    model = build_tiny_model(TinyModelSpec(size=2), seed=1)
    peft_model = apply_lora(model, LoRASettings(rank=4, alpha=8))
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    # Move the adapters away from their zero init so merging has something to fold in.
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    ids = torch.tensor([[3, 50, 51, 52, 4]])
    expected = peft_model.eval()(ids).logits
    export_merged(peft_model, build_char_tokenizer(), tmp_path)
    reloaded = load_causal_lm(str(tmp_path)).eval()
    assert not any("lora" in n for n, _ in reloaded.named_parameters())
    assert torch.allclose(reloaded(ids).logits, expected, atol=1e-5)
    assert load_tokenizer(str(tmp_path)).padding_side == "left"


def test_loading_errors_are_clear(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        load_causal_lm(str(tmp_path / "empty"))
    with pytest.raises(OSError, match="not a local model folder"):
        load_causal_lm("no-such-org/no-such-model")
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        resolve_dtype("float8")
    with pytest.raises(ValueError, match="rank must be > 0"):
        apply_lora(build_tiny_model(TinyModelSpec(size=1)), LoRASettings(rank=0))


def test_load_tokenizer_keeps_the_char_tokenizer_next_to_a_qwen2_config(tmp_path):
    # AutoTokenizer alone would pick Qwen2Tokenizer from config.json and drop spaces and newlines.
    tokenizer = build_char_tokenizer()
    build_tiny_model(TinyModelSpec(size=1)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(str(tmp_path))
    loaded = load_tokenizer(str(tmp_path))
    assert loaded("a b\nc")["input_ids"] == tokenizer("a b\nc")["input_ids"]
    messages = [{"role": "user", "content": "1+2="}]
    assert loaded.apply_chat_template(messages, tokenize=False) == tokenizer.apply_chat_template(
        messages, tokenize=False
    )


def _moved_adapters(model, seed: int = 0):
    """Give every LoRA B matrix N(0, 0.5) values (a fresh adapter's B is zero and merges to nothing)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name or "lora_embedding_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    return model.eval()


def test_peft_merges_an_adapter_on_tied_embeddings_into_both_ends():
    """Why `apply_lora` refuses such adapters: peft itself (no check of ours) merges an `lm_head` adapter of the tiny
    model (tied embeddings) into the one weight, and the merged model's logits are not the adapted model's. Should a
    peft release fix this, this test fails and the refusal can be revisited."""
    from peft import LoraConfig, get_peft_model

    model = build_tiny_model(TinyModelSpec(size=2), seed=1)
    assert tied_embedding_modules(model) == ["model.embed_tokens", "lm_head"]
    peft_model = _moved_adapters(get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "lm_head"])))
    ids = torch.tensor([[3, 50, 51, 52, 4]])
    with torch.no_grad():
        adapted = peft_model(ids).logits
        merged = peft_model.merge_and_unload()(ids).logits
    assert (adapted - merged).abs().max() > 1.0


@pytest.mark.parametrize("targets", [["q_proj", "lm_head"], ["embed_tokens"]])
def test_lora_on_tied_embeddings_is_refused_naming_the_setting_and_the_modules(targets):
    model = build_tiny_model(TinyModelSpec(size=2), seed=1)
    adapted = "lm_head" if "lm_head" in targets else "model.embed_tokens"
    with pytest.raises(ValueError) as refused:
        apply_lora(
            model, LoRASettings(rank=4, target_modules=targets), setting="trainer.policy.model.lora.target_modules"
        )
    message = str(refused.value)
    assert message.startswith(f"trainer.policy.model.lora.target_modules={targets!r} puts LoRA adapters on {adapted},")
    assert "model.embed_tokens and lm_head share one weight" in message and f"Leave {adapted} out of" in message


def test_lora_on_untied_embeddings_merges_to_the_adapted_model(tmp_path, tiny_hf_config):
    """With separate input and output embeddings an `lm_head` adapter is fine: the merged export is the model that
    was trained."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_hf_config("qwen2"))
    assert tied_embedding_modules(model) == []
    peft_model = _moved_adapters(apply_lora(model, LoRASettings(rank=4, target_modules=["q_proj", "lm_head"])))
    ids = torch.tensor([[3, 50, 51, 52, 4]])
    with torch.no_grad():
        expected = peft_model(ids).logits
    export_merged(peft_model, None, tmp_path)
    with torch.no_grad():
        assert torch.allclose(load_causal_lm(str(tmp_path)).eval()(ids).logits, expected, atol=1e-5)


def test_the_default_targets_leave_tied_embeddings_alone():
    """peft's `all-linear` skips the output layer, so the default LoRA of the tiny (tied) model is accepted."""
    trainable = apply_lora(build_tiny_model(TinyModelSpec(size=2), seed=1), LoRASettings(rank=4)).named_parameters()
    assert not any("lm_head" in name or "embed_tokens" in name for name, param in trainable if param.requires_grad)
