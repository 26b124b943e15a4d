"""Tests for choosing the chat template from config: built-in names, Jinja files, and the errors for bad values."""

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.models.chat_templates import apply_chat_template_config, resolve_chat_template
from skyrl_train.models.tokenizer import CHAT_TEMPLATE, build_char_tokenizer

CONVERSATION = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>two and two</think>\n4"},
    {"role": "user", "content": "and 3+3?"},
]


def _render(tokenizer):
    return tokenizer.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)


def _tokenizer_for(*overrides):
    cfg = SkyRLConfig.from_cli_overrides(list(overrides))
    return apply_chat_template_config(build_char_tokenizer(), cfg.generator.chat_template)


def test_default_keeps_the_tokenizers_template():
    assert _tokenizer_for().chat_template == CHAT_TEMPLATE


def test_qwen3_without_thinking_drops_reasoning_from_assistant_turns():
    text = _render(_tokenizer_for("generator.chat_template.name_or_path=qwen3_without_thinking"))
    assert "<think>" not in text and "<|im_start|>assistant\n4<|im_end|>" in text
    assert "<think>two and two</think>" in _render(build_char_tokenizer())  # the default keeps it
    assert text.endswith("<|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n")


def test_a_jinja_file_becomes_the_template(tmp_path):
    path = tmp_path / "template.jinja"
    path.write_text("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}")
    tokenizer = _tokenizer_for("generator.chat_template.source=file", f"generator.chat_template.name_or_path={path}")
    assert _render(tokenizer).splitlines()[0] == "[user] 2+2?"


def test_bad_names_and_paths_say_which_field_and_what_exists(tmp_path):
    with pytest.raises(ValueError, match=r"unknown template name 'qwen4'; built-in names are \['chatml', 'qwen3_"):
        resolve_chat_template("name", "qwen4")
    with pytest.raises(FileNotFoundError, match="generator.chat_template.name_or_path: no Jinja template file at"):
        resolve_chat_template("file", str(tmp_path / "missing.jinja"))
