"""The embedded `hf` engine: batched generation over a transformers model with a KV cache, on any torch device.

Continuous batching: requests with equal sampling params (seeds aside) decode as one batch (`hf_decode.DecodeBatch`);
a request that arrives while it runs joins it at the next token, and a completion goes back to its caller as soon as
it stops, so multi-turn trajectories that each ask for one completion at their own pace still share decode steps.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Optional, TypeVar

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from skyrl_train.inference.hf_decode import DecodeBatch, DecodeRow
from skyrl_train.inference.hf_prefix_cache import PrefixCache
from skyrl_train.inference.queued_engine import PendingRequest, QueuedEngine
from skyrl_train.inference.stopping import trim_stop_string
from skyrl_train.inference.types import SamplingParams
from skyrl_train.inference.weight_checks import check_weight_update
from skyrl_train.models.cpu_attention import use_cpu_sdpa
from skyrl_train.models.lora_state import AdapterMerger, parse_adapter_name
from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.utils.compute_clock import ComputeClock

T = TypeVar("T")


class HFInferenceEngine(QueuedEngine):
    """Generation with a Hugging Face causal LM held in this process.

    Args:
        model: the causal LM (its device is the engine's device).
        tokenizer: the model's tokenizer (chat template for message prompts, decoding, eos id).
        max_batch_size: most sequences decoded together (prompts x n).
        max_model_len: prompt + response limit; defaults to the model's max_position_embeddings.
        batch_wait_s: how long a request for a single completion waits for others before a batch starts (later ones
            join it); a request for several completions (prompts x n > 1) starts at once.
        admit_after_steps: the most decode steps a request that arrives mid-decode waits before joining (it joins
            sooner once the waiting rows are as many as the live ones).
        lora_alpha: set when the trainer trains LoRA adapters: weight syncs may then send adapter tensors only (peft
            names), which are merged into this engine's copy of the base weights (`W + alpha / r * B @ A`).
        in_flight_weight_updates: `update_weights` does not wait for running requests: it lands between two of their
            decode steps, their KV cache is rebuilt from their tokens so far with the new weights, and each token
            records the version that sampled it (the fully_async trainer's `weight_update_boundary: token`).
        enable_prefix_caching: keep each conversation's keys and values between calls (`hf_prefix_cache`): a prompt
            with a session id (every turn of a multi-turn rollout) prefills only what the session's previous call
            did not cover.
        prefix_cache_bytes: the most bytes of keys and values kept for that; the oldest go first.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        max_batch_size: int = 64,
        max_model_len: Optional[int] = None,
        batch_wait_s: float = 0.002,
        lora_alpha: Optional[float] = None,
        admit_after_steps: int = 4,
        in_flight_weight_updates: bool = False,
        enable_prefix_caching: bool = True,
        prefix_cache_bytes: int = 512 * 2**20,
    ) -> None:
        super().__init__(
            tokenizer,
            max_model_len or int(getattr(model.config, "max_position_embeddings", 2048)),
            batch_wait_s,
            vocab_size=int(model.get_input_embeddings().num_embeddings),
        )
        self.model = model.eval()
        self.cpu_attention = use_cpu_sdpa(model)
        """Whether the model attends with `models.cpu_attention.CPU_SDPA`: CPU models with grouped-query heads or
        half-precision weights on transformers' `sdpa` (no copy of the KV cache, half-precision attention in float32)."""
        self.max_batch_size = max_batch_size
        self.device = next(model.parameters()).device
        eos = model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_token_ids = eos_ids
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos_ids), 0)
        self._model_lock = threading.Lock()
        self._decoding = 0  # decode loops running (update_weights waits for none)
        self._weights_waiting = 0  # update_weights calls waiting: no new request joins a decode meanwhile
        self._executor: Optional[ThreadPoolExecutor] = None
        self.admit_after_steps = admit_after_steps
        self._kept_buffers: dict[str, torch.Tensor] = {}
        self.compute_clock = ComputeClock()
        """Seconds spent decoding batches (read by the framework-overhead benchmark)."""
        self.in_flight_weight_updates = in_flight_weight_updates
        """Weight updates land between two tokens of running requests, and `pause` does not wait for them."""
        self.adapter_merger = AdapterMerger(lora_alpha) if lora_alpha is not None else None
        """Merges synced LoRA adapters into the base weights (None: the engine takes full weights only)."""
        self.prefix_cache = PrefixCache(prefix_cache_bytes, self._weights_stamp) if enable_prefix_caching else None
        """Each conversation's keys and values between calls (None: off); emptied when the weights change."""

    # ----- generation -----------------------------------------------------------------------------------------
    def _check_servable(self) -> None:
        self._check_awake()

    def _check_params(self, params: SamplingParams) -> None:
        """The hf engine has no knobs beyond `SamplingParams`' own fields: refuse any `additional_kwargs`."""
        if params.additional_kwargs:
            names = sorted(name for name, _ in params.additional_kwargs)
            raise ValueError(
                f"the hf engine does not support the sampling arguments {names} (from sampling_params."
                "additional_kwargs); they are passed only to the vllm engine"
            )

    async def _serve(self, pending: list[PendingRequest]) -> None:
        """Decode the requests with the first one's sampling params continuously (rows join between steps and leave
        when they stop); requests with other params go back to the queue's head for the next round."""
        while self._weights_waiting:  # the update goes first; these requests then decode with the new weights
            await asyncio.sleep(0.001)
        key = self._params_key(pending[0].params)
        self._queue[:0] = [item for item in pending if self._params_key(item.params) != key]
        self._decoding += 1
        try:
            await self._decode_continuously([item for item in pending if self._params_key(item.params) == key], key)
        finally:
            self._decoding -= 1

    async def _serve_isolated(self, items: list[PendingRequest]) -> None:
        """Decode exactly `items` (all with one params key: they shared the batch that failed), taking no one in."""
        self._decoding += 1
        try:
            await self._decode_continuously(items, self._params_key(items[0].params), join=False)
        finally:
            self._decoding -= 1

    @staticmethod
    def _params_key(params: SamplingParams) -> SamplingParams:
        return replace(params, seed=None)  # a seed is per row (its own numbers), so seeded requests share a batch

    def _decode_rows(
        self,
        prompts: list[list[int]],
        seeds: list[Optional[int]],
        params: SamplingParams,
        tag: Callable[[int], Any],
        sessions: Sequence[Optional[Hashable]] = (),
    ) -> list[DecodeRow]:
        """The prompt x n rows to decode, prompt-major; row k (its result index) is tagged `tag(k)`, and a prompt's
        rows carry its session (when `sessions` is given)."""
        rows = []
        sessions = list(sessions) or [None] * len(prompts)
        for index, (prompt, seed, session) in enumerate(zip(prompts, seeds, sessions, strict=True)):
            budget = min(params.max_tokens, self.max_model_len - len(prompt))
            for j in range(params.n):
                # sample j of a prompt seeded `seed` draws from the stream of `seed + j`: its tokens do not depend
                # on the batch it shares (unseeded rows draw from torch's global generator when they join)
                row_seed = None if seed is None else seed + j
                rows.append(
                    DecodeRow(list(prompt), budget, tag=tag(index * params.n + j), seed=row_seed, session=session)
                )
        return rows

    def _rows_of(self, item: PendingRequest) -> list[DecodeRow]:
        """The prompt x n rows of one request, tagged with (request, result index); sizes `item.results`."""
        item.results = [None] * (len(item.prompts) * item.params.n)
        return self._decode_rows(item.prompts, item.seeds, item.params, lambda k: (item, k), item.sessions)

    async def _decode_continuously(self, items: list[PendingRequest], key: SamplingParams, join: bool = True) -> None:
        """Run one `DecodeBatch` until no row is live: between steps it takes queued requests with the same params
        (unless a request with other params is waiting, or a weight update is), up to `max_batch_size` rows.

        Waiting rows join a live batch once they are at least as many as its rows or have waited `admit_after_steps`
        steps: each join is a prefill forward of its own, and on a small model a forward's fixed cost dominates.
        When the batch fails, its unresolved requests are served again in smaller groups (`_isolate`); with
        `join=False` (one of those groups) no queued request joins, and a failure is raised to the caller."""
        backlog = [row for item in items for row in self._rows_of(item)]
        live: dict[int, PendingRequest] = {id(item): item for item in items}
        remaining = {id(item): len(item.results) for item in items}
        batch = DecodeBatch(
            self.model, key, self._stop_ids(key), self.pad_token_id, self.tokenizer, self._version, self.prefix_cache
        )
        waited = 0  # decode steps the oldest waiting row has waited
        try:
            while True:
                others_waiting = any(self._params_key(item.params) != key for item in self._queue)
                if join and not others_waiting and not self._weights_waiting:
                    joining = [item for item in self._queue if self._params_key(item.params) == key]
                    self._queue = [item for item in self._queue if self._params_key(item.params) != key]
                    for item in joining:
                        backlog.extend(self._rows_of(item))
                        live[id(item)], remaining[id(item)] = item, len(item.results)
                waited = waited + 1 if backlog and len(batch) else 0
                room = self.max_batch_size - len(batch) if batch.accepts_new_rows else 0
                if len(batch) and len(backlog) < len(batch) and waited < self.admit_after_steps:
                    room = 0  # let a few more arrive: one prefill for several rows costs about what one row's does
                admitted, backlog = backlog[:room], backlog[room:]
                if not admitted and not len(batch):
                    return
                # With nothing left to admit, the model thread runs step after step until a request completes or
                # another caller (a new request, a weight update) is waiting: one thread hop per call, not per token.
                run_on = not backlog
                for row in await self._in_model_thread(self._advance_locked, batch, admitted, remaining, run_on):
                    item, index = row.tag
                    item.results[index] = self._result(row, item.params)
                    if remaining[id(item)] == 0 and not item.future.done():
                        item.future.set_result(item.results)
                        live.pop(id(item))
        except Exception as exc:  # noqa: BLE001 - a failing batch fails its own callers only, each on its own
            if not join:
                raise
            await self._isolate(list(live.values()), exc)

    async def _in_model_thread(self, function: Callable[..., T], *args: Any) -> T:
        """Run `function` in the engine's own thread: decode steps never queue behind other work in asyncio's default
        executor (an agent's tool calls, say), and the thread uses the torch thread count set where the engine runs."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                1, "skyrl-hf-engine", initializer=torch.set_num_threads, initargs=(torch.get_num_threads(),)
            )
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    def _stop_ids(self, params: SamplingParams) -> set[int]:
        return set(params.stop_token_ids) | (set() if params.ignore_eos else self.eos_token_ids)

    def _text(self, row: DecodeRow, params: SamplingParams) -> str:
        text = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
        return trim_stop_string(text, params.stop, params.include_stop_str_in_output)

    def _result(self, row: DecodeRow, params: SamplingParams) -> tuple:
        """What a finished row returns: (text, ids, logprobs, stop_reason, top_logprobs, token versions)."""
        return (self._text(row, params), row.tokens, row.logprobs, row.reason, row.tops, row.versions)

    def _advance_locked(
        self, batch: DecodeBatch, admitted: list[DecodeRow], remaining: dict[int, int], run_on: bool
    ) -> list[DecodeRow]:
        """Admit `admitted` and decode one step; with `run_on`, keep stepping while no request has completed, rows
        are left and no one waits to join or to update the weights. Returns the finished rows, having counted them
        off `remaining` (rows still to finish per request, keyed by `id(request)`)."""
        finished: list[DecodeRow] = []
        with self._model_lock, self.compute_clock("generate"):
            if batch.version != self._version:  # an in-flight update landed between two tokens of this batch
                batch.recompute(self._version)
            batch.admit(admitted)
            while True:
                completed = False
                for row in batch.step():
                    finished.append(row)
                    key = id(row.tag[0])
                    remaining[key] -= 1
                    completed = completed or remaining[key] == 0
                # the queue and the weight-update count belong to the event loop's thread; reading them here only
                # decides whether to hand control back to it a step earlier
                if not run_on or completed or not len(batch) or self._queue or self._weights_waiting:
                    return finished

    def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, seeds: Optional[list[Optional[int]]] = None
    ) -> list[tuple]:
        """Decode `prompts` synchronously; returns (text, ids, logprobs, stop_reason, top_logprobs, token versions) per
        prompt x n, prompt-major (`top_logprobs`: per generated token, `params.top_logprobs` `(token_id, logprob)`
        pairs).

        At most `max_batch_size` rows decode at once; a finished row's place goes to the next waiting one. `seeds`
        (one per prompt, default `params.seed`) give sample j of a prompt the random stream of `seed + j`, so its
        tokens do not depend on the batch it shares.
        """
        seeds = list(seeds) if seeds is not None else [params.seed] * len(prompts)
        rows = self._decode_rows(prompts, seeds, params, lambda k: k)
        results: list[Optional[tuple]] = [None] * len(rows)
        batch = DecodeBatch(
            self.model, params, self._stop_ids(params), self.pad_token_id, self.tokenizer, self._version
        )
        with self._model_lock, self.compute_clock("generate"):
            while rows or len(batch):
                room = self.max_batch_size - len(batch) if batch.accepts_new_rows else 0
                batch.admit(rows[:room])
                rows = rows[room:]
                for row in batch.step():
                    results[row.tag] = self._result(row, params)
        return results

    # ----- lifecycle --------------------------------------------------------------------------------------------
    async def sleep(self, level: int = 1) -> None:
        """Level 1: weights stay (on CPU there is nothing to offload to) and caches are dropped; level 2: weights
        are discarded, so `update_weights` with every parameter must follow `wake_up`."""
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        await self.pause_and_drain()
        with self._model_lock:
            self._drop_prefixes()
            if level == 2:
                # Buffers (e.g. rotary inv_freq, non-persistent so never in a state dict or a weight sync) are small
                # and derived from the config: keep them so wake_up does not leave them as uninitialised memory.
                self._kept_buffers = {name: buf.detach().clone() for name, buf in self.model.named_buffers()}
                self.model.to("meta")
                self._weights_discarded = True
            self._asleep = True

    async def wake_up(self) -> None:
        """Restore memory; after a level-2 sleep, weights are allocated but must be filled by `update_weights`."""
        with self._model_lock:
            if self._weights_discarded:
                self.model.to_empty(device=self.device)
                self.model.tie_weights()
                buffers = dict(self.model.named_buffers())
                with torch.no_grad():
                    for name, kept in self._kept_buffers.items():
                        buffers[name].copy_(kept)
                self._kept_buffers = {}
            self._asleep = False
        await self.resume()

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Copy new values into the named parameters/buffers and serve them as `version`.

        Requests being decoded finish with the weights they started with (no new request joins them meanwhile), so
        every completion comes from one version; queued requests then decode with the new weights. With
        `in_flight_weight_updates` the update lands between two decode steps instead: the running rows' cache is
        rebuilt with the new weights and their next tokens record the new version."""
        self._weights_waiting += 1
        try:
            while self._decoding and not self.in_flight_weight_updates:
                await asyncio.sleep(0.001)
            await self._in_model_thread(self._update_weights_locked, list(named_tensors), version)
        finally:
            self._weights_waiting -= 1

    def _update_weights_locked(self, named_tensors: list[tuple[str, torch.Tensor]], version: int) -> None:
        """Two phases: every tensor's name, shape and dtype are checked (and, after a level-2 sleep, that every
        parameter came) before the first one is copied, so an update refused anywhere changes no weight and no
        version."""
        with self._model_lock:
            state = dict(self.model.named_parameters(remove_duplicate=False))
            state.update(dict(self.model.named_buffers()))
            check_weight_update([(n, t) for n, t in named_tensors if parse_adapter_name(n) is None], state)
            if self.adapter_merger is not None:
                plain, merged = self.adapter_merger.add(named_tensors, state)
                named_tensors = plain + merged
                check_weight_update(merged, state)
            elif any(parse_adapter_name(name) for name, _ in named_tensors):
                raise ValueError(
                    "update_weights got LoRA adapter tensors, but this hf engine was built without LoRA "
                    "(lora_alpha=None): set trainer.policy.model.lora.rank so the engines merge adapters"
                )
            if self._weights_discarded:
                sent = {name for name, _ in named_tensors}
                missing = sorted(n for n, _ in self.model.named_parameters(remove_duplicate=False) if n not in sent)
                if missing:
                    raise ValueError(
                        f"update_weights after sleep(level=2) must send every parameter; missing {missing}"
                    )
            with torch.no_grad():
                for name, tensor in named_tensors:
                    target = state[name]
                    target.copy_(tensor.to(device=target.device, dtype=target.dtype))
            self._weights_discarded = False
            self._version = version
            self._drop_prefixes()

    async def take_cache_counts(self) -> dict[str, int]:
        """The prefix cache's counts since the last call (`{}` with it off)."""
        with self._model_lock:
            return self.prefix_cache.take_counts() if self.prefix_cache is not None else {}

    async def reset_prefix_cache(self) -> None:
        """Drop every conversation's kept keys and values."""
        with self._model_lock:
            self._drop_prefixes()

    def _weights_stamp(self) -> int:
        """The sum of the parameters' in-place version counters: it changes whenever a weight is written in place
        (an optimizer step on this very model object, a copy into it), which the prefix cache must notice."""
        return sum(parameter._version for parameter in self.model.parameters())

    def _drop_prefixes(self) -> None:
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    async def weights_checksum(self, names: Optional[list[str]] = None) -> dict[str, float]:
        """Checksums of the served parameters (all, or the named ones)."""
        with self._model_lock:
            params = dict(self.model.named_parameters())
            if self.adapter_merger is not None:  # the adapter tensors merged into the served weights
                params.update(self.adapter_merger.received)
            return {name: tensor_checksum(params[name]) for name in (names or list(params))}

    async def teardown(self) -> None:
        """Refuse further calls."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=False)
