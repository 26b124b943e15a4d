"""The OpenAI request bodies this server accepts, and OpenAI-style error bodies.

Fields OpenAI defines but this server cannot honour are refused with a 400 naming the field (rather than silently
ignored); fields that change nothing about the output (`user`, `stream_options`, `metadata`, `store`,
`parallel_tool_calls`, `service_tier`) are accepted. Two extensions: `top_k` and `return_token_ids` (the response
always carries `prompt_token_ids` and each choice's `token_ids`, for token-in/token-out training harnesses).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

HARMLESS_FIELDS = {"user", "stream_options", "metadata", "store", "parallel_tool_calls", "service_tier"}
"""Accepted and ignored: they do not change what is generated."""

REFUSED_UNLESS_DEFAULT = {
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "logit_bias": None,
    "best_of": None,
    "echo": False,
    "suffix": None,
    "response_format": None,
    "modalities": None,
    "audio": None,
    "prediction": None,
    "reasoning_effort": None,
}
"""OpenAI fields this server does not implement: refused unless left at their default."""

MAX_STOP_STRINGS = 4
"""Most stop strings per request (as OpenAI)."""

MAX_STOP_STRING_CHARS = 256
"""Longest stop string: the engines look for every stop string in the decoded response after each token."""


class ServingError(Exception):
    """A request the server refuses: becomes an OpenAI-style error body with `status`, naming `param`."""

    def __init__(
        self, message: str, param: Optional[str] = None, status: int = 400, kind: str = "invalid_request_error"
    ):
        super().__init__(message)
        self.message, self.param, self.status, self.kind = message, param, status, kind

    def body(self) -> dict[str, Any]:
        """`{"error": {"message", "type", "param", "code"}}` as the OpenAI API returns it."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    n: int = Field(1, ge=1, le=64)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = -1
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = None
    stream: bool = False
    return_token_ids: bool = False

    def check_extras(self) -> None:
        """Refuse unknown fields and implemented-nowhere ones set to anything but their default."""
        for name, value in (self.model_extra or {}).items():
            if name in HARMLESS_FIELDS:
                continue
            if name in REFUSED_UNLESS_DEFAULT:
                if value != REFUSED_UNLESS_DEFAULT[name]:
                    raise ServingError(f"{name} is not supported by this server (got {value!r})", param=name)
                continue
            raise ServingError(f"unknown field {name!r}", param=name)

    def stop_strings(self) -> tuple[str, ...]:
        """`stop` as a tuple (OpenAI allows a string or up to 4 strings), each non-empty and at most
        `MAX_STOP_STRING_CHARS` characters."""
        if self.stop is None:
            return ()
        stops = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if len(stops) > MAX_STOP_STRINGS:
            raise ServingError(f"stop takes at most {MAX_STOP_STRINGS} sequences, got {len(stops)}", param="stop")
        for index, stop in enumerate(stops):
            if not stop or len(stop) > MAX_STOP_STRING_CHARS:
                raise ServingError(
                    f"stop[{index}] has {len(stop)} characters; a stop string takes 1 to {MAX_STOP_STRING_CHARS}",
                    param="stop",
                )
        return stops


class CompletionRequest(_Request):
    """`POST /v1/completions`: one prompt as text or token ids (a list of prompts is refused: one per request)."""

    prompt: Union[str, list[int]]
    max_tokens: int = Field(16, ge=1)
    logprobs: Optional[int] = Field(None, ge=0, le=20)


class ChatCompletionRequest(_Request):
    """`POST /v1/chat/completions`: messages rendered by the model's chat template (tools included)."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[Literal["none", "auto"], dict[str, Any]]] = None

    def token_limit(self, default: int) -> int:
        """`max_completion_tokens`, else `max_tokens`, else `default`."""
        return self.max_completion_tokens or self.max_tokens or default
