"""`QueuedEngine`: the request side shared by the in-process engines (`hf`, `vllm`).

It admits generate calls (`pause` / `resume`), renders and checks their prompts, and queues them; a drain task
takes everything queued after `batch_wait_s` and hands it to the subclass's `_serve`, so concurrent calls (the
trajectories of a multi-turn rollout each asking for one completion) decode together. A call that asks for several
completions (prompts x n > 1) was batched by its caller and starts at once.

One caller's bad request fails only itself: a prompt that is empty, too long or holds a token id outside the
vocabulary is refused (`InvalidRequest`) before it joins a batch, and when a batch fails anyway its requests are
served again in halves, down to one request at a time (`_isolate`), so each gets its own answer or its own error.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Optional

from skyrl_train.inference.base import InferenceEngine
from skyrl_train.inference.types import InferenceEngineInput, InferenceEngineOutput, InvalidRequest, SamplingParams


@dataclass
class PendingRequest:
    """One queued generate call: its rendered prompts, params, per-prompt seeds, and the future its caller awaits
    (resolved with one `(text, ids, logprobs, stop_reason, top_logprobs)` row per prompt x n, prompt-major;
    `top_logprobs` is a list of `(token_id, logprob)` lists per generated token, empty when not asked for)."""

    prompts: list[list[int]]
    params: SamplingParams
    seeds: list[Optional[int]]
    future: asyncio.Future
    results: list[tuple] = field(default_factory=list)
    sessions: list[Optional[Hashable]] = field(default_factory=list)
    """The conversation of each prompt (`InferenceEngineInput.session_ids`; empty when the caller gave none)."""


class QueuedEngine(InferenceEngine):
    """Admission, prompt rendering and batching for engines held in this process.

    Subclasses implement `_check_servable` (raise when the engine cannot generate now) and `_serve(pending)`
    (resolve the future of every pending request); when `_serve` raises, the requests it left unresolved are served
    again in smaller groups (`_isolate`) until the one that fails fails alone. `_check_params` may refuse sampling
    params the engine cannot honour; `vocab_size` (when known) bounds the token ids of a prompt.
    """

    in_flight_weight_updates: bool = False
    """True on an engine whose running requests take weight updates between two tokens (`pause` then holds new
    calls only)."""

    def __init__(
        self, tokenizer: Any, max_model_len: int, batch_wait_s: float, vocab_size: Optional[int] = None
    ) -> None:
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        """Token ids of a prompt must lie in [0, vocab_size) (None: not checked here, e.g. a remote server checks)."""
        self.batch_wait_s = batch_wait_s
        self._queue: list[PendingRequest] = []
        self._drainer: Optional[asyncio.Task] = None
        self._admitting: Optional[asyncio.Event] = None
        self._inflight = 0
        self._closed = False
        self._version = 0
        self._asleep = False
        self._weights_discarded = False

    @property
    def weight_version(self) -> int:
        """The version of the weights being served."""
        return self._version

    def _check_awake(self) -> None:
        """Raise while the engine sleeps or after sleep level 2 discarded its weights (the part of
        `_check_servable` every in-process engine shares)."""
        if self._asleep or self._weights_discarded:
            raise RuntimeError(
                f"{type(self).__name__} is asleep or its weights were discarded (sleep level 2); "
                "call wake_up() and update_weights() before generate()"
            )

    @abc.abstractmethod
    def _check_servable(self) -> None:
        """Raise if the engine cannot generate now (asleep, weights missing)."""

    def _check_params(self, params: SamplingParams) -> None:
        """Raise if the engine cannot honour `params` (the default accepts everything)."""

    @abc.abstractmethod
    async def _serve(self, pending: list[PendingRequest]) -> None:
        """Generate for every pending request and resolve its future."""

    async def _serve_isolated(self, items: list[PendingRequest]) -> None:
        """Serve exactly `items` (no other request joins them) and raise if they fail; `_isolate` calls it after a
        failed batch. The default is `_serve`, right for engines whose `_serve` takes no one else in."""
        await self._serve(items)

    def _admission(self) -> asyncio.Event:
        if self._admitting is None:
            self._admitting = asyncio.Event()
            self._admitting.set()
        return self._admitting

    async def generate(self, request: InferenceEngineInput) -> InferenceEngineOutput:
        """Generate `n` completions per prompt; concurrent calls share batches."""
        if self._closed:
            raise RuntimeError(f"{type(self).__name__}.generate called after teardown()")
        await self._admission().wait()
        self._check_servable()
        self._check_params(request.sampling_params)
        prompts = self._prompt_ids(request)
        for index, prompt in enumerate(prompts):
            self._check_prompt(index, prompt)
        params = request.sampling_params
        self._inflight += 1
        try:
            future = asyncio.get_running_loop().create_future()
            sessions = list(request.session_ids or [])
            self._queue.append(PendingRequest(prompts, params, request.prompt_seeds(), future, sessions=sessions))
            if self._drainer is None or self._drainer.done():
                self._drainer = asyncio.create_task(self._drain())
            rows = await future
        finally:
            self._inflight -= 1
        texts, ids, logprobs, reasons, tops = zip(*(row[:5] for row in rows)) if rows else ((), (), (), (), ())
        # an engine that records each token's weight version returns it as a sixth element
        token_versions = [list(row[5]) for row in rows] if rows and len(rows[0]) > 5 else None
        sampled_by = [version for versions in token_versions or [] for version in versions]
        return InferenceEngineOutput(
            responses=list(texts),
            response_ids=[list(x) for x in ids],
            stop_reasons=list(reasons),
            response_logprobs=[list(x) for x in logprobs] if params.logprobs else None,
            response_top_logprobs=[list(x) for x in tops] if params.top_logprobs > 0 else None,
            weight_version=min(sampled_by) if sampled_by else self.weight_version,
            response_token_versions=token_versions,
        )

    def _check_prompt(self, index: int, prompt: list[int]) -> None:
        """Refuse a prompt that cannot decode: empty, as long as the context, or holding an id outside the vocabulary
        (it would fail the whole batch it joined, e.g. with an embedding IndexError)."""
        if not prompt:
            raise InvalidRequest(f"prompt {index} is empty; every prompt needs at least one token")
        if len(prompt) >= self.max_model_len:
            raise InvalidRequest(
                f"prompt {index} has {len(prompt)} tokens; the engine's max_model_len is {self.max_model_len}"
            )
        if self.vocab_size is not None and (min(prompt) < 0 or max(prompt) >= self.vocab_size):
            position, token = next((i, t) for i, t in enumerate(prompt) if not 0 <= t < self.vocab_size)
            raise InvalidRequest(
                f"prompt {index} holds token id {token} at position {position}; token ids must be in "
                f"[0, {self.vocab_size}) for this model"
            )

    def _prompt_ids(self, request: InferenceEngineInput) -> list[list[int]]:
        if request.prompt_token_ids is not None:
            return [list(ids) for ids in request.prompt_token_ids]
        rendered = []
        for messages in request.prompts:
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            rendered.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
        return rendered

    async def _drain(self) -> None:
        """Serve queued requests in batches until the queue is empty."""
        while self._queue:
            if not any(len(item.prompts) * item.params.n > 1 for item in self._queue):
                await asyncio.sleep(self.batch_wait_s)  # single completions: let concurrent callers' calls gather
            pending, self._queue = self._queue, []
            try:
                await self._serve(pending)
            except Exception as exc:  # noqa: BLE001 - every caller gets its own outcome
                await self._isolate(pending, exc)

    async def _isolate(self, items: list[PendingRequest], exc: Exception) -> None:
        """After a batch of `items` failed with `exc`: serve the unresolved ones again in halves, down to one request
        at a time, so the request that makes a batch fail fails alone (with its own error) and every other one gets
        its answer. A bad request among k then costs about 2 log2(k) extra batches, not k."""
        unresolved = [item for item in items if not item.future.done()]
        if len(unresolved) <= 1:
            for item in unresolved:
                item.future.set_exception(exc)
            return
        middle = len(unresolved) // 2
        for half in (unresolved[:middle], unresolved[middle:]):
            try:
                await self._serve_isolated(half)
            except Exception as failure:  # noqa: BLE001 - narrowed down further
                await self._isolate(half, failure)

    async def pause(self) -> None:
        """Hold new generate calls; return once the in-flight ones finished (at once on an engine whose running
        calls take weight updates between two tokens: `in_flight_weight_updates`)."""
        if self.in_flight_weight_updates:
            self._admission().clear()
        else:
            await self.pause_and_drain()

    async def pause_and_drain(self) -> None:
        """Hold new generate calls; return once the in-flight ones finished."""
        self._admission().clear()
        while self._inflight > 0:
            await asyncio.sleep(0.001)

    async def resume(self) -> None:
        """Admit generate calls again."""
        self._admission().set()
