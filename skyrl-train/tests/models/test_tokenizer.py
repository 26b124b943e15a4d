"""Tests for the embedded character-level tokenizer and its chat template."""

from transformers import AutoTokenizer

from skyrl_train.models.tokenizer import DEFAULT_ALPHABET, build_char_tokenizer

MESSAGES = [{"role": "user", "content": "What is 12+35?"}, {"role": "assistant", "content": "47"}]


def test_one_token_per_character_and_exact_round_trip():
    tok = build_char_tokenizer()
    text = "a b\n\t{x}: 12+35=47!"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert len(tok) == 5 + len(DEFAULT_ALPHABET)


def test_special_tokens_have_fixed_ids_and_unknown_chars_map_to_unk():
    tok = build_char_tokenizer()
    assert (tok.pad_token_id, tok.unk_token_id, tok.eos_token_id) == (0, 1, 4)
    assert tok.convert_tokens_to_ids("<|im_start|>") == 3
    ids = tok("x<|im_end|>é")["input_ids"]
    assert ids[1:] == [4, 1]
    assert tok.decode(ids, skip_special_tokens=True) == "x"


def test_chat_template_renders_chatml_with_generation_prompt():
    tok = build_char_tokenizer()
    prompt = tok.apply_chat_template(MESSAGES[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nWhat is 12+35?<|im_end|>\n<|im_start|>assistant\n"
    full = tok.apply_chat_template(MESSAGES, tokenize=False)
    assert full == prompt + "47<|im_end|>\n"
    with_tools = tok.apply_chat_template(MESSAGES[:1], tokenize=False, tools=[{"name": "calc"}])
    assert (
        with_tools.startswith("<|im_start|>system\nYou can call these tools")
        and '\n{"name": "calc"}<|im_end|>' in with_tools
    )


def test_saves_and_reloads_offline_with_padding_side_and_template(tmp_path):
    tok = build_char_tokenizer()
    tok.save_pretrained(str(tmp_path))
    again = AutoTokenizer.from_pretrained(str(tmp_path), local_files_only=True)
    assert again.padding_side == "left"
    assert again("hello")["input_ids"] == tok("hello")["input_ids"]
    assert again.apply_chat_template(MESSAGES, tokenize=False) == tok.apply_chat_template(MESSAGES, tokenize=False)
