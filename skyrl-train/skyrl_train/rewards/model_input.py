"""What a reward model reads: the prompt's chat messages and the response, rendered with the reward model's own
tokenizer and cut to `reward.model.max_length` tokens."""

from __future__ import annotations

from typing import Any


def render_conversation(tokenizer: Any, prompt: list[dict[str, str]], response: str) -> list[int]:
    """Token ids of `prompt` + the assistant `response` in the reward model's vocabulary.

    With a chat template: the template applied to the messages plus `{"role": "assistant", "content": response}`
    (no generation prompt), tokenized without adding special tokens (the template holds them). Without one: the
    messages' contents and the response joined by newlines, tokenized with the tokenizer's special tokens.
    """
    if getattr(tokenizer, "chat_template", None):
        messages = [*prompt, {"role": "assistant", "content": response}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    text = "\n".join([message["content"] for message in prompt] + [response])
    return list(tokenizer(text, add_special_tokens=True)["input_ids"])


def keep_last_tokens(token_ids: list[int], max_length: int) -> tuple[list[int], bool]:
    """(the last `max_length` ids, whether any were dropped): the response's end, where the score is read, stays."""
    if max_length < 1:
        raise ValueError(f"reward.model.max_length must be at least 1, got {max_length}")
    if len(token_ids) <= max_length:
        return token_ids, False
    return token_ids[-max_length:], True


def reward_model_token_ids(
    tokenizer: Any, prompt: list[dict[str, str]], response: str, max_length: int
) -> tuple[list[int], bool]:
    """`render_conversation` cut by `keep_last_tokens`: (token ids, truncated)."""
    return keep_last_tokens(render_conversation(tokenizer, prompt, response), max_length)
