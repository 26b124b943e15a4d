"""An OpenAI-compatible HTTP API (`/v1/models`, `/v1/completions`, `/v1/chat/completions`) over an
`InferenceEngineClient`, so every engine backend serves it.

    app = create_app(client, tokenizer, model_name="skyrl/embedded")
    uvicorn.run(app, host="127.0.0.1", port=8000)

Every request becomes one `InferenceEngineInput` of token ids (chat messages rendered by the tokenizer's chat
template, tools included), and the engine's own tokens, logprobs and stop reasons are reported back. Responses carry
`prompt_token_ids` and each choice's `token_ids` (an extension) so a training harness gets token-in/token-out data.
Streaming sends the finished output as server-sent-event chunks of one token each: the engines generate a whole
response per call, so the first chunk arrives when the response is complete. The per-token work (detokenising,
logprob entries) runs in a worker thread, never on the event loop; the pieces come from a bounded window of ids
(`serving.detokenize`). Keys, the body cap and the docs pages are `ServingAccess`'s (`serving.access`).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from skyrl_train.inference.gate import WeightGate
from skyrl_train.inference.types import InferenceEngineInput, InferenceEngineOutput, InvalidRequest, SamplingParams
from skyrl_train.serving.access import BearerAuth, ServingAccess
from skyrl_train.serving.body_limit import BodySizeLimit
from skyrl_train.serving.detokenize import stream_pieces
from skyrl_train.serving.protocol import ChatCompletionRequest, CompletionRequest, ServingError
from skyrl_train.serving.tool_calls import parse_tool_calls
from skyrl_train.serving.weight_updates import add_weight_update_routes

FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "stop"}
DEFAULT_CHAT_MAX_TOKENS = 256


def _token_text(tokenizer: Any, token_id: int) -> str:
    return tokenizer.decode([token_id])


class OpenAIServer:
    """The request handlers; `create_app` mounts them."""

    def __init__(self, client: Any, tokenizer: Any, model_name: str, gate: Optional[WeightGate] = None) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.gate = gate or WeightGate()

    # ----- shared ---------------------------------------------------------------------------------------------
    def check_model(self, model: str) -> None:
        """404 for another model name, as OpenAI answers."""
        if model != self.model_name:
            raise ServingError(
                f"the model {model!r} does not exist; this server serves {self.model_name!r}", param="model", status=404
            )

    def sampling(self, request: Any, max_tokens: int, top_logprobs: int) -> SamplingParams:
        """The request's sampling fields as engine `SamplingParams` (logprobs are always computed)."""
        try:
            return SamplingParams(
                max_tokens=max_tokens,
                temperature=request.temperature,
                top_p=request.top_p,
                top_k=request.top_k,
                stop=request.stop_strings(),
                n=request.n,
                seed=request.seed,
                logprobs=True,
                top_logprobs=top_logprobs,
            )
        except ValueError as exc:
            raise ServingError(str(exc).removeprefix("SamplingParams: ")) from exc

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, param: str) -> InferenceEngineOutput:
        """One engine call for one prompt; what the engine refuses before decoding (a prompt too long for the
        context, a token id outside the vocabulary) is a 400 naming `param`, the request field the prompt came from."""
        if not prompt_ids:
            raise ServingError("the prompt is empty", param=param)
        try:
            async with self.gate.serving():  # a training run closes it while the engines' weights change
                return await self.client.generate(
                    InferenceEngineInput(prompt_token_ids=[prompt_ids], sampling_params=sampling)
                )
        except InvalidRequest as exc:
            raise ServingError(f"{param}: {exc}", param=param) from exc

    @staticmethod
    def usage(prompt_ids: list[int], output: InferenceEngineOutput) -> dict[str, int]:
        """Token counts of the request (completion tokens over every choice)."""
        completion = sum(len(ids) for ids in output.response_ids)
        return {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion,
            "total_tokens": len(prompt_ids) + completion,
        }

    # ----- /v1/completions ------------------------------------------------------------------------------------
    def completion_logprobs(self, output: InferenceEngineOutput, index: int) -> dict[str, Any]:
        """The legacy completions logprobs object of choice `index`."""
        ids = output.response_ids[index]
        tokens = [_token_text(self.tokenizer, token) for token in ids]
        offsets, position = [], 0
        for token in tokens:
            offsets.append(position)
            position += len(token)
        tops = output.response_top_logprobs[index] if output.response_top_logprobs is not None else None
        return {
            "tokens": tokens,
            "token_logprobs": list(output.response_logprobs[index]),
            "top_logprobs": (
                [{_token_text(self.tokenizer, t): lp for t, lp in step} for step in tops] if tops is not None else None
            ),
            "text_offset": offsets,
        }

    async def completions(self, request: CompletionRequest) -> Any:
        """`POST /v1/completions`."""
        request.check_extras()
        self.check_model(request.model)
        if isinstance(request.prompt, str):
            prompt_ids = list(self.tokenizer(request.prompt, add_special_tokens=False)["input_ids"])
        else:
            prompt_ids = list(request.prompt)
        sampling = self.sampling(request, request.max_tokens, request.logprobs or 0)
        output = await self.generate(prompt_ids, sampling, "prompt")
        created, response_id = int(time.time()), f"cmpl-{uuid.uuid4().hex}"
        choices = await asyncio.to_thread(self.completion_choices, output, request.logprobs is not None)
        if request.stream:
            return self.stream_completion(response_id, created, choices, output)
        return self.response("text_completion", response_id, created, choices, prompt_ids, output)

    def completion_choices(self, output: InferenceEngineOutput, logprobs: bool) -> list[dict[str, Any]]:
        """The `text_completion` choices of `output` (per-token work: run it off the event loop)."""
        return [
            {
                "index": index,
                "text": output.responses[index],
                "logprobs": self.completion_logprobs(output, index) if logprobs else None,
                "finish_reason": FINISH_REASONS.get(output.stop_reasons[index], "stop"),
                "token_ids": output.response_ids[index],
                **self.token_versions(output, index),
            }
            for index in range(len(output.responses))
        ]

    @staticmethod
    def token_versions(output: InferenceEngineOutput, index: int) -> dict[str, Any]:
        """`{"token_versions": [...]}`: the weight version that sampled each token of choice `index`, when the
        engine records it (an extension, like `token_ids`); `{}` otherwise."""
        versions = output.response_token_versions
        return {} if versions is None else {"token_versions": list(versions[index])}

    def stream_event(self, response_id: str, created: int, kind: str, choice: dict[str, Any]) -> str:
        """One server-sent event of a streamed response: a chunk of object type `kind` (`text_completion` or
        `chat.completion.chunk`) holding `choice`."""
        body = {"id": response_id, "object": kind, "created": created, "model": self.model_name, "choices": [choice]}
        return f"data: {json.dumps(body)}\n\n"

    def stream_completion(self, response_id: str, created: int, choices: list, output: InferenceEngineOutput) -> Any:
        """The choices as `text_completion` chunks, one token each, then `[DONE]`."""

        def chunk(index: int, text: str, finish: Optional[str], extra: Optional[dict] = None) -> str:
            choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish, **(extra or {})}
            return self.stream_event(response_id, created, "text_completion", choice)

        async def events() -> AsyncIterator[str]:
            for choice in choices:
                ids = output.response_ids[choice["index"]]
                for piece in await asyncio.to_thread(stream_pieces, self.tokenizer, ids, choice["text"]):
                    yield chunk(choice["index"], piece, None)
                yield chunk(choice["index"], "", choice["finish_reason"], {"token_ids": ids})
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    # ----- /v1/chat/completions -------------------------------------------------------------------------------
    def render_chat(self, request: ChatCompletionRequest) -> list[int]:
        """The messages (and tools, unless `tool_choice` is `none`) through the chat template, generation prompt on."""
        if isinstance(request.tool_choice, dict):
            raise ServingError("tool_choice naming a function is not supported; use 'auto' or 'none'", "tool_choice")
        tools = request.tools if request.tools and request.tool_choice != "none" else None
        try:
            rendered = self.tokenizer.apply_chat_template(
                request.messages, tools=tools, add_generation_prompt=True, tokenize=True
            )
        except Exception as exc:  # a message the template cannot render (missing role/content, a bad tool)
            raise ServingError(f"the chat template could not render the messages: {exc}", param="messages") from exc
        return list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)

    def chat_logprobs(self, output: InferenceEngineOutput, index: int) -> dict[str, Any]:
        """The chat logprobs object (`content`: one entry per token, with its top alternatives)."""

        def entry(token_id: int, logprob: float) -> dict[str, Any]:
            text = _token_text(self.tokenizer, token_id)
            return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

        tops = output.response_top_logprobs[index] if output.response_top_logprobs is not None else None
        content = []
        for position, (token, logprob) in enumerate(zip(output.response_ids[index], output.response_logprobs[index])):
            alternatives = [entry(t, lp) for t, lp in tops[position]] if tops is not None else []
            content.append({**entry(token, logprob), "top_logprobs": alternatives})
        return {"content": content}

    async def chat_completions(self, request: ChatCompletionRequest) -> Any:
        """`POST /v1/chat/completions`."""
        request.check_extras()
        self.check_model(request.model)
        if request.top_logprobs and not request.logprobs:
            raise ServingError("top_logprobs needs logprobs=true", param="top_logprobs")
        prompt_ids = self.render_chat(request)
        sampling = self.sampling(request, request.token_limit(DEFAULT_CHAT_MAX_TOKENS), request.top_logprobs or 0)
        output = await self.generate(prompt_ids, sampling, "messages")
        created, response_id = int(time.time()), f"chatcmpl-{uuid.uuid4().hex}"
        choices = await asyncio.to_thread(self.chat_choices, output, request)
        if request.stream:
            return self.stream_chat(response_id, created, choices, output)
        return self.response("chat.completion", response_id, created, choices, prompt_ids, output)

    def response(
        self,
        kind: str,
        response_id: str,
        created: int,
        choices: list[dict[str, Any]],
        prompt_ids: list[int],
        output: InferenceEngineOutput,
    ) -> dict[str, Any]:
        """A non-streamed response object of `kind` (`text_completion` or `chat.completion`), with the prompt's token
        ids and the weight version that answered, which agent harnesses train on."""
        return {
            "id": response_id,
            "object": kind,
            "created": created,
            "model": self.model_name,
            "choices": choices,
            "usage": self.usage(prompt_ids, output),
            "prompt_token_ids": prompt_ids,
            "weight_version": output.weight_version,
        }

    def chat_choices(self, output: InferenceEngineOutput, request: ChatCompletionRequest) -> list[dict[str, Any]]:
        """The `chat.completion` choices of `output`, tool calls parsed (per-token work: run it off the event loop)."""
        parse_tools = bool(request.tools) and request.tool_choice != "none"
        choices = []
        for index, text in enumerate(output.responses):
            content, calls = parse_tool_calls(text) if parse_tools else (text, [])
            message: dict[str, Any] = {"role": "assistant", "content": content if (content or not calls) else None}
            if calls:
                message["tool_calls"] = calls
            finish = "tool_calls" if calls else FINISH_REASONS.get(output.stop_reasons[index], "stop")
            choices.append(
                {
                    "index": index,
                    "message": message,
                    "logprobs": self.chat_logprobs(output, index) if request.logprobs else None,
                    "finish_reason": finish,
                    "token_ids": output.response_ids[index],
                }
            )
        return choices

    def stream_chat(self, response_id: str, created: int, choices: list, output: InferenceEngineOutput) -> Any:
        """The choices as `chat.completion.chunk` events: the role, one token of content each, tool calls, the
        finish reason, then `[DONE]`."""

        def chunk(index: int, delta: dict, finish: Optional[str], extra: Optional[dict] = None) -> str:
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish, **(extra or {})}
            return self.stream_event(response_id, created, "chat.completion.chunk", choice)

        async def events() -> AsyncIterator[str]:
            for choice in choices:
                index, message = choice["index"], choice["message"]
                yield chunk(index, {"role": "assistant", "content": ""}, None)
                if message.get("tool_calls"):
                    if message["content"]:
                        yield chunk(index, {"content": message["content"]}, None)
                    calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
                    yield chunk(index, {"tool_calls": calls}, None)
                else:
                    ids, text = output.response_ids[index], message["content"] or ""
                    for piece in await asyncio.to_thread(stream_pieces, self.tokenizer, ids, text):
                        yield chunk(index, {"content": piece}, None)
                yield chunk(index, {}, choice["finish_reason"], {"token_ids": choice["token_ids"]})
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    def models(self) -> dict[str, Any]:
        """`GET /v1/models`."""
        card = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "skyrl"}
        lengths = [getattr(engine, "max_model_len", None) for engine in getattr(self.client, "engines", [self.client])]
        if lengths and all(isinstance(length, int) for length in lengths):
            card["max_model_len"] = min(lengths)  # as vLLM reports it
        return {"object": "list", "data": [card]}


def _validation_error(exc: RequestValidationError) -> JSONResponse:
    """A pydantic error as OpenAI's 400 body, naming the first bad field."""
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    location = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(location) or None
    message = f"{param}: {first.get('msg')}" if param else str(first.get("msg"))
    return JSONResponse(status_code=400, content=ServingError(message, param=param).body())


def create_app(
    client: Any,
    tokenizer: Any,
    model_name: str,
    gate: Optional[WeightGate] = None,
    weight_updates: bool = False,
    access: Optional[ServingAccess] = None,
) -> FastAPI:
    """The FastAPI app serving `client` (an `InferenceEngineClient` or any engine) under `model_name`; requests hold
    `gate` open while they generate (a training run closes it while the weights change). `weight_updates` adds the
    `/skyrl/*` routes that let a training run load new weights into it (`serving.weight_updates`); they need a token
    (`access.weight_update_token` or `access.api_key`). `access` (default: no key, the default body cap, no docs
    pages) sets who may call the app and how large a body may be."""
    access = access or ServingAccess()
    if weight_updates and access.update_token is None:
        raise ValueError(
            "the weight-update routes need a token (ServingAccess.weight_update_token or api_key): without one, anyone "
            "who reaches the port could replace the served weights"
        )
    server = OpenAIServer(client, tokenizer, model_name, gate)
    docs = {} if access.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="skyrl OpenAI-compatible server", **docs)
    app.state.server = server
    app.state.access = access
    # the last one added runs first: the key is checked from the headers before any byte of the body is counted
    app.add_middleware(BodySizeLimit, max_bytes=access.max_request_bytes)
    app.add_middleware(BearerAuth, api_key=access.api_key, weight_update_token=access.update_token)

    @app.exception_handler(ServingError)
    async def serving_error(_: Request, exc: ServingError) -> JSONResponse:
        return JSONResponse(status_code=exc.status, content=exc.body())

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_error(exc)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return server.models()

    @app.post("/v1/completions")
    async def completions(request: CompletionRequest) -> Any:
        return await server.completions(request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: ChatCompletionRequest) -> Any:
        return await server.chat_completions(request)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    if weight_updates:
        from skyrl_train.inference.remote_engine import default_weights_root

        root = access.weight_update_root or str(default_weights_root())
        add_weight_update_routes(app, client, model_name, root)
    return app
