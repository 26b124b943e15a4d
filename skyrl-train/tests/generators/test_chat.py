"""Tests for the chat-template helpers: batched prompt tokenization and conversation keys."""

import pytest

from skyrl_train.generators.chat import conversation_key, prompt_token_ids, prompt_token_ids_batch
from skyrl_train.models.tokenizer import build_char_tokenizer

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def test_batched_prompt_ids_equal_one_call_per_prompt(tokenizer):
    conversations = [
        ([{"role": "user", "content": "What is 2+3?"}], None),
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "12-7="}], None),
        ([{"role": "user", "content": "Find it."}], TOOLS),
        ([{"role": "user", "content": "<answer>x</answer> and spaces  "}], None),
    ]
    expected = [prompt_token_ids(tokenizer, messages, tools) for messages, tools in conversations]
    assert prompt_token_ids_batch(tokenizer, conversations) == expected
    assert prompt_token_ids_batch(tokenizer, []) == []
    # with arguments that change tokenization, each prompt is tokenized by apply_chat_template itself
    truncating = {"truncation": True, "max_length": 5}
    assert prompt_token_ids_batch(tokenizer, conversations, truncating) == [
        prompt_token_ids(tokenizer, messages, tools, truncating) for messages, tools in conversations
    ]
    assert all(len(ids) == 5 for ids in prompt_token_ids_batch(tokenizer, conversations, truncating))


def test_conversation_key_is_equal_exactly_for_equal_conversations():
    first = [{"role": "user", "content": "2+3"}]
    assert conversation_key(first, None) == conversation_key([{"content": "2+3", "role": "user"}], None)
    assert conversation_key(first, None) != conversation_key([{"role": "user", "content": "2+4"}], None)
    assert conversation_key(first, None) != conversation_key(first, TOOLS)  # tools are part of the prompt
    nested = [{"role": "user", "content": [{"type": "text", "text": "2+3"}]}]  # list content: the JSON key
    assert conversation_key(nested, None) == conversation_key(
        [{"content": [{"text": "2+3", "type": "text"}], "role": "user"}], None
    )
    assert conversation_key(nested, None) != conversation_key(
        [{"role": "user", "content": [{"type": "text", "text": "2"}]}], None
    )
    hash(conversation_key(nested, TOOLS))
