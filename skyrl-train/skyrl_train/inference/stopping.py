"""Decide when a sequence stops: eos, stop token ids, stop strings, or length; and trim stop strings from text."""

from __future__ import annotations

from typing import Optional

from skyrl_train.inference.types import SamplingParams


class StopChecker:
    """Per-request stop rules. `check(token_ids, text)` returns a stop reason or None for a row still going."""

    def __init__(self, params: SamplingParams, eos_token_ids: set[int], max_tokens: int) -> None:
        self.stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            self.stop_ids |= eos_token_ids
        self.stop_strings = params.stop
        self.max_tokens = max_tokens

    @property
    def needs_text(self) -> bool:
        """True when stop strings require decoding the response while generating."""
        return bool(self.stop_strings)

    def check(self, token_ids: list[int], text: Optional[str] = None) -> Optional[str]:
        """'stop' on a stop token or string, 'length' at the token budget, else None."""
        if token_ids and token_ids[-1] in self.stop_ids:
            return "stop"
        if text is not None and any(s in text for s in self.stop_strings):
            return "stop"
        if len(token_ids) >= self.max_tokens:
            return "length"
        return None


def trim_stop_string(text: str, stop: tuple[str, ...], include: bool) -> str:
    """Cut `text` at the earliest stop string (keeping it when `include`)."""
    cut = None
    for s in stop:
        index = text.find(s)
        if index != -1:
            end = index + len(s) if include else index
            cut = end if cut is None else min(cut, end)
    return text if cut is None else text[:cut]
