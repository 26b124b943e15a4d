"""The `openai` backend: any OpenAI-compatible server (ours, `vllm serve`, a hosted API).

`mode: completions` (default) sends the context's token ids as the prompt and asks for the sampled token ids back
(`return_token_ids`, which our server and vLLM honour) with logprobs: token-in/token-out. `mode: chat` sends the
messages and tool schemas (for servers that only speak chat); the reply's text is re-tokenized and the turn is marked
`exact_tokens=False` unless the server returned token ids.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Optional

from skyrl_agent.backends.base import AgentBackend, Generation, TurnRequest
from skyrl_train.inference.types import SamplingParams

MODES = ("completions", "chat")


class OpenAIBackend(AgentBackend):
    """Generates through an OpenAI-compatible HTTP server with the official `openai` client."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: Any,
        api_key: str = "EMPTY",
        mode: str = "completions",
        timeout_s: float = 120.0,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"OpenAIBackend: mode must be one of {list(MODES)}, got {mode!r}")
        import openai

        self._new_client = functools.partial(openai.AsyncOpenAI, base_url=base_url, api_key=api_key, timeout=timeout_s)
        self.model, self.tokenizer, self.mode = model, tokenizer, mode
        self._client: Any = None
        self._client_loop: Optional[asyncio.AbstractEventLoop] = None

    @property
    def client(self) -> Any:
        """The `openai.AsyncOpenAI` client of the running event loop, made at its first use there.

        Its pooled connections belong to the loop that opened them: reused from another loop they fail with "Event
        loop is closed" (two `AgentRunner.run` calls, each its own loop). A client left by a loop that has closed
        cannot be closed any more; it is dropped and a new one made."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client, self._client_loop = self._new_client(), loop
        return self._client

    @staticmethod
    def _common(params: SamplingParams, seed: Optional[int]) -> dict[str, Any]:
        extra: dict[str, Any] = {"return_token_ids": True}
        if params.top_k > 0:
            extra["top_k"] = params.top_k
        if params.stop_token_ids:
            extra["stop_token_ids"] = list(params.stop_token_ids)
        kwargs: dict[str, Any] = {
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "extra_body": extra,
        }
        if params.stop:
            kwargs["stop"] = list(params.stop)
        if seed is not None:
            kwargs["seed"] = seed
        return kwargs

    async def generate(self, request: TurnRequest) -> Generation:
        """One completion (or chat completion) request."""
        kwargs = self._common(request.params, request.seed)
        if self.mode == "completions":
            response = await self.client.completions.create(
                model=self.model, prompt=list(request.prompt_ids), logprobs=1, **kwargs
            )
            choice = response.choices[0]
            text = choice.text
            logprobs = list(choice.logprobs.token_logprobs) if choice.logprobs is not None else None
        else:
            response = await self.client.chat.completions.create(
                model=self.model,
                messages=request.messages,
                tools=request.tools or None,
                logprobs=True,
                **kwargs,
            )
            choice = response.choices[0]
            text = choice.message.content or ""
            content = getattr(choice.logprobs, "content", None) if choice.logprobs is not None else None
            logprobs = [entry.logprob for entry in content] if content else None
        ids = getattr(choice, "token_ids", None)
        if ids is None:
            ids = list((choice.model_extra or {}).get("token_ids") or [])
        exact = bool(ids)
        if not exact:  # the server did not say which tokens it sampled: the text's tokens stand in for them
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            logprobs = logprobs if logprobs is not None and len(logprobs) == len(ids) else None
        stop_reason = "length" if choice.finish_reason == "length" else "stop"
        return Generation(list(ids), text, stop_reason, logprobs, exact_tokens=exact)

    async def release_loop(self) -> None:
        """Close this loop's client (its connections); the next turn, in any loop, makes a new one."""
        client, loop = self._client, self._client_loop
        self._client, self._client_loop = None, None
        if client is not None and loop is asyncio.get_running_loop():  # another loop's connections died with it
            await client.close()

    async def close(self) -> None:
        """Close the HTTP connections."""
        await self.release_loop()
