"""What an agent generates with: `AgentBackend.generate(TurnRequest) -> Generation`, one model turn at a time."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Optional

from skyrl_train.inference.types import SamplingParams


@dataclass
class TurnRequest:
    """One model turn: the context as token ids (what token-in/token-out backends send) and as chat messages with
    the tool schemas (what a chat-only backend sends), the sampling params and the turn's seed."""

    prompt_ids: list[int]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    params: SamplingParams
    seed: Optional[int] = None


@dataclass
class Generation:
    """One model turn's output. `token_ids` are exactly what the model sampled when `exact_tokens` (else the
    backend's text re-tokenized: a chat-only server that does not return token ids); `logprobs` are per token (None
    when the backend does not report them); `stop_reason` is `stop` or `length`."""

    token_ids: list[int]
    text: str
    stop_reason: str
    logprobs: Optional[list[float]] = None
    weight_version: int = 0
    exact_tokens: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


class AgentBackend(abc.ABC):
    """An inference backend; `name` is the config's `generator.backend` value it serves."""

    name: str = ""

    @abc.abstractmethod
    async def generate(self, request: TurnRequest) -> Generation:
        """Sample one model turn."""

    async def release_loop(self) -> None:
        """Release what is bound to the running event loop (an async HTTP client's connections, say) and stay usable
        in the next loop. `AgentRunner.run` makes an event loop per call and calls this before closing it. The
        default holds nothing bound to a loop."""
        return None

    async def close(self) -> None:
        """Release connections; the default holds none."""
        return None
