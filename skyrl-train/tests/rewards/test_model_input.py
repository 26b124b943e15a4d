"""Rendering prompt + response for a reward model with its own tokenizer, and the left truncation rule."""

import pytest

from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.rewards.model_input import keep_last_tokens, render_conversation, reward_model_token_ids

PROMPT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2="}]


def test_a_chat_template_renders_the_response_as_the_assistant_turn():
    tokenizer = build_char_tokenizer()
    ids = render_conversation(tokenizer, PROMPT, "4")
    expected = (
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n2+2=<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
    )
    assert tokenizer.decode(ids) == expected


def test_without_a_chat_template_the_contents_are_joined_by_newlines():
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = None
    ids = render_conversation(tokenizer, PROMPT, "4")
    assert tokenizer.decode(ids) == "be brief\n2+2=\n4"


def test_long_inputs_keep_their_last_tokens():
    assert keep_last_tokens([1, 2, 3, 4], 3) == ([2, 3, 4], True)
    assert keep_last_tokens([1, 2], 3) == ([1, 2], False)
    with pytest.raises(ValueError, match="reward.model.max_length must be at least 1"):
        keep_last_tokens([1], 0)
    tokenizer = build_char_tokenizer()
    ids, truncated = reward_model_token_ids(tokenizer, PROMPT, "the answer is 4", max_length=10)
    assert truncated and tokenizer.decode(ids) == "wer is 4<|im_end|>\n"  # 10 tokens: 8 chars, im_end, newline
