"""Chat-templated prompt ids, as the engines receive them: what the dataset measures prompts with and what the
generators send (one implementation, so the ids a dataset computed once can stand in for the generator's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Messages = list[dict[str, Any]]
"""Chat messages, `[{role, content, ...}, ...]`."""

_TOKENIZING_KWARGS = frozenset(
    {"tokenizer_kwargs", "truncation", "max_length", "padding", "return_tensors", "return_dict"}
)
"""`apply_chat_template` arguments that change how the rendered text is tokenized: with any of them, the batched
helper lets `apply_chat_template` tokenize each prompt itself."""


def _as_ids(encoded: Any) -> list[int]:
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def prompt_token_ids(
    tokenizer: PreTrainedTokenizerBase,
    messages: Messages,
    tools: Optional[list[dict]] = None,
    chat_template_kwargs: Optional[dict[str, Any]] = None,
) -> list[int]:
    """Token ids of the chat-templated prompt with the generation prompt appended."""
    return _as_ids(
        tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, **(chat_template_kwargs or {})
        )
    )


def prompt_token_ids_batch(
    tokenizer: PreTrainedTokenizerBase,
    conversations: list[tuple[Messages, Optional[list[dict]]]],
    chat_template_kwargs: Optional[dict[str, Any]] = None,
) -> list[list[int]]:
    """`prompt_token_ids` of each `(messages, tools)`: every prompt rendered by the template, then all encoded in one
    tokenizer call without added special tokens, which is what `apply_chat_template(tokenize=True)` does per prompt
    (same ids, about half the cost: the per-call overhead was most of it for short prompts)."""
    kwargs = chat_template_kwargs or {}
    if not conversations:
        return []
    if _TOKENIZING_KWARGS.intersection(kwargs):
        return [prompt_token_ids(tokenizer, messages, tools, kwargs) for messages, tools in conversations]
    texts = [
        tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False, **kwargs)
        for messages, tools in conversations
    ]
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
