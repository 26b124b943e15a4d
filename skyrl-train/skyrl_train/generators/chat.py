"""Chat-template helpers for token-in/token-out rollouts: prompt ids, and the tokens that follow a model turn."""

from __future__ import annotations

import json
from array import array
from collections import OrderedDict
from typing import Any, Optional

from transformers import PreTrainedTokenizerBase

from skyrl_train.dataset.templating import prompt_token_ids as prompt_token_ids  # re-exported: the generators' API
from skyrl_train.dataset.templating import prompt_token_ids_batch as prompt_token_ids_batch
from skyrl_train.inference.types import Messages

_PROBE_CONTENT = "\x00SKYRL-PROBE\x00"


def conversation_key(messages: Messages, tools: Optional[list[dict]]) -> Any:
    """A hashable key equal for equal `(messages, tools)`: a tuple of the messages' items when every message is a
    flat dict of strings and there are no tools (the common case, ~20x cheaper), else their canonical JSON."""
    flat = all(isinstance(message, dict) and all(isinstance(v, str) for v in message.values()) for message in messages)
    if tools is None and flat:
        return tuple(tuple(sorted(message.items())) for message in messages)
    return json.dumps([messages, tools], sort_keys=True, default=repr)


class PromptIdsCache:
    """Chat-templated prompt ids by `conversation_key`, so a run that sees a prompt again (every epoch after the
    first, every evaluation) templates and tokenizes it once. Once the cached ids pass `max_tokens` tokens the least
    recently used prompts are dropped (ids are kept as 8-byte arrays: the default holds at most 16 MB)."""

    def __init__(self, max_tokens: int = 2_000_000) -> None:
        self.max_tokens = max_tokens
        self.tokens = 0
        self.hits = 0
        self.misses = 0
        self._ids: OrderedDict[Any, array] = OrderedDict()

    def prompt_ids(
        self,
        tokenizer: PreTrainedTokenizerBase,
        conversations: dict[Any, tuple[Messages, Optional[list[dict]]]],
        chat_template_kwargs: Optional[dict[str, Any]] = None,
    ) -> dict[Any, list[int]]:
        """`prompt_token_ids` of each `conversation_key -> (messages, tools)`; the ones not cached are tokenized in
        one `prompt_token_ids_batch` call. The tokenizer and `chat_template_kwargs` must be the same on every call."""
        found: dict[Any, list[int]] = {}
        missing = []
        for key in conversations:
            cached = self._ids.get(key)
            if cached is None:
                missing.append(key)
            else:
                self._ids.move_to_end(key)
                found[key] = cached.tolist()
        self.hits += len(found)
        self.misses += len(missing)
        fresh = prompt_token_ids_batch(tokenizer, [conversations[key] for key in missing], chat_template_kwargs)
        for key, ids in zip(missing, fresh):
            found[key] = ids
            self._keep(key, ids)
        return found

    def remember(self, key: Any, ids: list[int]) -> None:
        """Hold `ids` as the prompt ids of `key` (computed elsewhere with the same tokenizer and kwargs, e.g. by the
        dataset's length check), unless that key is held already."""
        if key not in self._ids:
            self._keep(key, ids)

    def _keep(self, key: Any, ids: list[int]) -> None:
        if len(ids) > self.max_tokens:
            return
        self._ids[key] = array("q", ids)
        self.tokens += len(ids)
        while self.tokens > self.max_tokens:
            _, dropped = self._ids.popitem(last=False)
            self.tokens -= len(dropped)

    def __len__(self) -> int:
        return len(self._ids)


class ObservationRenderer:
    """Renders env observations as the exact text the chat template puts after a finished assistant turn.

    It renders a probe conversation once with and once without the observations; the difference, plus whatever the
    template writes after the assistant's end-of-turn token, is what must follow the model's tokens. This keeps the
    model's own tokens untouched (no decode and re-encode of what it generated).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, chat_template_kwargs: Optional[dict[str, Any]] = None):
        if tokenizer.eos_token is None:
            raise ValueError("the tokenizer has no eos_token; multi-turn rollouts need one to close a model turn")
        self.tokenizer = tokenizer
        self.kwargs = chat_template_kwargs or {}
        self.eos_token_id = tokenizer.eos_token_id
        base = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _PROBE_CONTENT}]
        rendered = tokenizer.apply_chat_template(base, tokenize=False, **self.kwargs)
        marker = _PROBE_CONTENT + tokenizer.eos_token
        at = rendered.rfind(marker)
        if at == -1:
            raise ValueError(
                "the chat template does not end an assistant turn with the eos token "
                f"({tokenizer.eos_token!r}) after the turn's own text; pass a template that does, set "
                "generator.retokenize_chat_history=true (with step_wise_trajectories=true) to template each turn anew, "
                "or use a custom generator"
            )
        self._base = base
        self._base_text = rendered
        self._after_eos = rendered[at + len(marker) :]

    def continuation_ids(self, observations: Messages) -> list[int]:
        """Tokens that follow a model turn ending in eos: the template's tail, the observations, the next prompt."""
        full = self.tokenizer.apply_chat_template(
            self._base + list(observations), tokenize=False, add_generation_prompt=True, **self.kwargs
        )
        if not full.startswith(self._base_text):
            raise ValueError("the chat template renders earlier turns differently once observations follow")
        text = self._after_eos + full[len(self._base_text) :]
        return list(self.tokenizer.encode(text, add_special_tokens=False))
