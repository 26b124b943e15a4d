"""`ScriptedBackend`: a backend whose turns a test writes, for testing agents and tasks without a model.

The agent, its parsing, tools, token bookkeeping and dispatcher run for real; only the model's text is chosen by
`script(request)`. Use it to check how an agent handles a given model output (a malformed call, a long answer);
use a real backend to check what a model does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from skyrl_agent.backends.base import AgentBackend, Generation, TurnRequest

SCRIPTED_LOGPROB = -0.25
"""The logprob `ScriptedBackend` reports for every token."""


class ScriptedBackend(AgentBackend):
    """Answers each turn with `script(request)`, tokenized and ending in eos (cut to `max_tokens`, then without
    eos and with stop reason `length`), every logprob `SCRIPTED_LOGPROB`. `delay_s` per turn stands for model time.
    `requests` keeps every request; `peak` is the most turns in flight at once. `name` is the backend it stands in
    for (the config's `generator.backend`)."""

    def __init__(
        self, tokenizer: Any, script: Callable[[TurnRequest], str], delay_s: float = 0.0, name: str = "skyrl_train"
    ) -> None:
        self.tokenizer, self.script, self.delay_s, self.name = tokenizer, script, delay_s, name
        self.requests: list[TurnRequest] = []
        self.in_flight = self.peak = 0

    async def generate(self, request: TurnRequest) -> Generation:
        """The scripted turn."""
        self.requests.append(request)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            text = self.script(request)
        finally:
            self.in_flight -= 1
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))[: request.params.max_tokens]
        stop = "length" if len(ids) == request.params.max_tokens else "stop"
        if stop == "stop":
            ids.append(self.tokenizer.eos_token_id)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Generation(ids, text, stop, [SCRIPTED_LOGPROB] * len(ids))
