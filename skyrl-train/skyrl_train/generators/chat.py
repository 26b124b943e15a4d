"""Chat-template helpers for token-in/token-out rollouts: prompt ids, and the tokens that follow a model turn."""

from __future__ import annotations

from typing import Any, Optional

from transformers import PreTrainedTokenizerBase

from skyrl_train.inference.types import Messages

_PROBE_CONTENT = "\x00SKYRL-PROBE\x00"


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
                f"({tokenizer.eos_token!r}); pass a template that does, or a custom generator"
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
