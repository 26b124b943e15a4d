"""Tests for model loading and LoRA: wrap, train only adapters, merge, export and reload."""

import pytest
import torch

from skyrl_train.models.loading import load_causal_lm, load_tokenizer, resolve_dtype
from skyrl_train.models.lora import LoRASettings, apply_lora, export_merged
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
