"""Tests for the chat-template helpers: batched prompt tokenization, the prompt-ids cache and conversation keys."""

from skyrl_train.generators.chat import PromptIdsCache, conversation_key, prompt_token_ids, prompt_token_ids_batch

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}]


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


def _conversations(*contents):
    return {
        conversation_key(messages, None): (messages, None)
        for messages in ([{"role": "user", "content": content}] for content in contents)
    }


def test_the_prompt_cache_templates_a_prompt_once_and_returns_fresh_lists(tokenizer, monkeypatch):
    rendered = []
    template = type(tokenizer).apply_chat_template

    def counting(self, conversation, *args, **kwargs):
        rendered.append(conversation[-1]["content"])
        return template(self, conversation, *args, **kwargs)

    monkeypatch.setattr(type(tokenizer), "apply_chat_template", counting)
    cache = PromptIdsCache()
    first = cache.prompt_ids(tokenizer, _conversations("2+3=", "40-7="))
    again = cache.prompt_ids(tokenizer, _conversations("40-7=", "9+9="))
    assert rendered == ["2+3=", "40-7=", "9+9="]  # the repeated prompt was not templated again
    assert (cache.hits, cache.misses, len(cache)) == (1, 3, 3)
    for ids in [*first.values(), *again.values()]:
        assert isinstance(ids, list)
    key = conversation_key([{"role": "user", "content": "40-7="}], None)
    assert again[key] == first[key] == prompt_token_ids(tokenizer, [{"role": "user", "content": "40-7="}])
    again[key].append(-1)  # a caller's list is its own
    assert cache.prompt_ids(tokenizer, _conversations("40-7="))[key] == first[key]


def test_the_prompt_cache_drops_the_least_recently_used_prompts_past_its_token_budget(tokenizer):
    one = len(prompt_token_ids(tokenizer, [{"role": "user", "content": "1+1="}]))
    cache = PromptIdsCache(max_tokens=2 * one)
    cache.prompt_ids(tokenizer, _conversations("1+1=", "2+2="))
    cache.prompt_ids(tokenizer, _conversations("1+1="))  # now the most recently used
    cache.prompt_ids(tokenizer, _conversations("3+3="))  # over budget: 2+2= goes
    assert cache.tokens <= 2 * one and len(cache) == 2
    misses = cache.misses
    cache.prompt_ids(tokenizer, _conversations("1+1=", "3+3="))
    assert cache.misses == misses  # both still cached
    cache.prompt_ids(tokenizer, _conversations("2+2="))
    assert cache.misses == misses + 1


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
