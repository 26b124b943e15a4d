"""The embedded `hf` engine: batched generation over a transformers model with a KV cache, on any torch device.

Concurrent `generate` calls are gathered into shared batches (requests with equal sampling params run together), so
many multi-turn trajectories that each ask for one completion still decode as one batch. Finished rows leave the
batch and its KV cache as soon as they stop.
"""

from __future__ import annotations

import asyncio
import difflib
import threading
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Optional

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from skyrl_train.inference.queued_engine import PendingRequest, QueuedEngine
from skyrl_train.inference.sampling import sample_next_tokens, top_logprobs
from skyrl_train.inference.stopping import StopChecker, trim_stop_string
from skyrl_train.inference.types import SamplingParams
from skyrl_train.models.lora_state import AdapterMerger, parse_adapter_name
from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.utils.compute_clock import ComputeClock


class HFInferenceEngine(QueuedEngine):
    """Generation with a Hugging Face causal LM held in this process.

    Args:
        model: the causal LM (its device is the engine's device).
        tokenizer: the model's tokenizer (chat template for message prompts, decoding, eos id).
        max_batch_size: most sequences decoded together (prompts x n).
        max_model_len: prompt + response limit; defaults to the model's max_position_embeddings.
        batch_wait_s: how long a new request waits for others to join its batch.
        lora_alpha: set when the trainer trains LoRA adapters: weight syncs may then send adapter tensors only (peft
            names), which are merged into this engine's copy of the base weights (`W + alpha / r * B @ A`).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        max_batch_size: int = 64,
        max_model_len: Optional[int] = None,
        batch_wait_s: float = 0.002,
        lora_alpha: Optional[float] = None,
    ) -> None:
        super().__init__(
            tokenizer, max_model_len or int(getattr(model.config, "max_position_embeddings", 2048)), batch_wait_s
        )
        self.model = model.eval()
        self.max_batch_size = max_batch_size
        self.device = next(model.parameters()).device
        eos = model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_token_ids = eos_ids
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos_ids), 0)
        self._version = 0
        self._model_lock = threading.Lock()
        self._asleep = False
        self._weights_discarded = False
        self._kept_buffers: dict[str, torch.Tensor] = {}
        self.compute_clock = ComputeClock()
        """Seconds spent decoding batches (read by the framework-overhead benchmark)."""
        self.adapter_merger = AdapterMerger(lora_alpha) if lora_alpha is not None else None
        """Merges synced LoRA adapters into the base weights (None: the engine takes full weights only)."""

    # ----- generation -----------------------------------------------------------------------------------------
    @property
    def weight_version(self) -> int:
        """The version of the weights being served."""
        return self._version

    def _check_servable(self) -> None:
        if self._asleep or self._weights_discarded:
            raise RuntimeError(
                "HFInferenceEngine is asleep or its weights were discarded (sleep level 2); "
                "call wake_up() and update_weights() before generate()"
            )

    def _check_params(self, params: SamplingParams) -> None:
        """The hf engine has no knobs beyond `SamplingParams`' own fields: refuse any `additional_kwargs`."""
        if params.additional_kwargs:
            names = sorted(name for name, _ in params.additional_kwargs)
            raise ValueError(
                f"the hf engine does not support the sampling arguments {names} (from sampling_params."
                "additional_kwargs); they are passed only to the vllm engine"
            )

    async def _serve(self, pending: list[PendingRequest]) -> None:
        """Decode requests with equal sampling params together; a failing group fails only its own callers."""
        for group in self._group(pending):
            try:
                await self._run_group(group)
            except Exception as exc:
                for item in group:
                    if not item.future.done():
                        item.future.set_exception(exc)

    @staticmethod
    def _group(pending: list[PendingRequest]) -> list[list[PendingRequest]]:
        groups: dict[Any, list[PendingRequest]] = {}
        for item in pending:  # a seed is per row (its own generator), so seeded requests can share a batch
            groups.setdefault(replace(item.params, seed=None), []).append(item)
        return list(groups.values())

    async def _run_group(self, group: list[PendingRequest]) -> None:
        params = group[0].params
        flat = [(item, prompt, seed) for item in group for prompt, seed in zip(item.prompts, item.seeds)]
        per_chunk = max(1, self.max_batch_size // params.n)
        for start in range(0, len(flat), per_chunk):
            chunk = flat[start : start + per_chunk]
            prompts, seeds = [prompt for _, prompt, _ in chunk], [seed for _, _, seed in chunk]
            rows = await asyncio.to_thread(self._generate_locked, prompts, params, seeds)
            for index, (item, _, _) in enumerate(chunk):
                item.results.extend(rows[index * params.n : (index + 1) * params.n])
        for item in group:
            item.future.set_result(item.results)

    def _generate_locked(
        self, prompts: list[list[int]], params: SamplingParams, seeds: Optional[list[Optional[int]]] = None
    ) -> list[tuple]:
        with self._model_lock, self.compute_clock("generate"):
            return self.generate_batch(prompts, params, seeds)

    def _row_uniforms(self, seeds: list[Optional[int]], params: SamplingParams, steps: int) -> Optional[torch.Tensor]:
        """Uniform numbers [rows, steps] driving the sampling of each row when any prompt is seeded (None if not).

        Sample j of a prompt seeded `s` draws its numbers from a generator seeded `s + j`; unseeded rows draw from
        torch's global generator. One draw per row per batch keeps seeded sampling vectorised.
        """
        if params.temperature == 0 or all(seed is None for seed in seeds):
            return None
        columns = [
            torch.rand(steps) if seed is None else torch.rand(steps, generator=torch.Generator().manual_seed(seed + j))
            for seed in seeds
            for j in range(params.n)
        ]
        return torch.stack(columns).to(self.device)

    @torch.inference_mode()
    def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, seeds: Optional[list[Optional[int]]] = None
    ) -> list[tuple]:
        """Decode one batch synchronously; returns (text, ids, logprobs, stop_reason, top_logprobs) per prompt x n,
        prompt-major (`top_logprobs`: per generated token, `params.top_logprobs` `(token_id, logprob)` pairs).

        Rows advance in lockstep, so step k writes column k of preallocated token/logprob buffers; stop tokens and
        budgets are checked as tensors, and only stop strings need per-row text. `seeds` (one per prompt, default
        `params.seed`) give sample j of a prompt its own generator seeded `seed + j`, so its tokens do not depend on
        the batch it shares.
        """
        rows = [prompt for prompt in prompts for _ in range(params.n)]
        count, device = len(rows), self.device
        seeds = list(seeds) if seeds is not None else [params.seed] * len(prompts)
        width = max(len(r) for r in rows)
        input_ids = torch.full((count, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((count, width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, width - len(row) :] = torch.tensor(row)
            attention[i, width - len(row) :] = 1
        budgets = torch.tensor([min(params.max_tokens, self.max_model_len - len(r)) for r in rows], device=device)
        steps = int(budgets.max())
        uniforms = self._row_uniforms(seeds, params, steps)
        input_ids, attention = input_ids.to(device), attention.to(device)
        attention = torch.cat([attention, attention.new_ones((count, steps))], dim=1)  # grown by slicing, not concat
        positions = (attention[:, :width].cumsum(-1) - 1).clamp(min=0)
        stop_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else self.eos_token_ids)
        stop_tensor = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
        out_tokens = torch.zeros((count, steps), dtype=torch.long, device=device)
        out_logprobs = torch.zeros((count, steps), dtype=torch.float32, device=device)
        k = min(params.top_logprobs, int(self.model.config.vocab_size))
        out_top_ids = torch.zeros((count, steps, k), dtype=torch.long, device=device)
        out_top_logprobs = torch.zeros((count, steps, k), dtype=torch.float32, device=device)
        seen = self._seen_tokens(rows, params)
        lengths = torch.zeros(count, dtype=torch.long, device=device)
        reasons: list[Optional[str]] = [None] * count
        stop_strings = StopChecker(params, set(), params.max_tokens) if params.stop else None
        cache = DynamicCache(config=self.model.config)
        logits = self.model(
            input_ids=input_ids,
            attention_mask=attention[:, :width],
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        ).logits[:, -1, :]
        next_positions = positions[:, -1] + 1
        alive = torch.arange(count, device=device)  # original row of each live batch position
        for step in range(steps):
            live_seen = None if seen is None else seen[alive]
            tokens, logprobs = sample_next_tokens(
                logits, params, uniforms=None if uniforms is None else uniforms[alive, step], seen=live_seen
            )
            out_tokens[alive, step] = tokens
            out_logprobs[alive, step] = logprobs.float()
            if k > 0:
                top_values, top_ids = top_logprobs(logits, params, k, live_seen)
                out_top_ids[alive, step] = top_ids
                out_top_logprobs[alive, step] = top_values
            if seen is not None:
                seen[alive, tokens] = True
            lengths[alive] = step + 1
            stopped = (
                torch.isin(tokens, stop_tensor) if stop_tensor.numel() else torch.zeros_like(tokens, dtype=torch.bool)
            )
            if stop_strings is not None:
                for j, row in enumerate(alive.tolist()):
                    if not stopped[j] and stop_strings.check([], self.tokenizer.decode(out_tokens[row, : step + 1])):
                        stopped[j] = True
            exhausted = budgets[alive] <= step + 1
            finished = stopped | exhausted
            if bool(finished.any()):
                for j in finished.nonzero().flatten().tolist():
                    reasons[int(alive[j])] = "stop" if bool(stopped[j]) else "length"
                keep = (~finished).nonzero().flatten()
                if keep.numel() == 0:
                    break
                cache.batch_select_indices(keep)
                alive, tokens, next_positions = alive[keep], tokens[keep], next_positions[keep]
                attention = attention[keep]  # live rows only, like the cache; columns below are a view
            logits = self.model(
                input_ids=tokens.unsqueeze(1),
                attention_mask=attention[:, : width + step + 1],
                position_ids=next_positions.unsqueeze(1),
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1, :]
            next_positions = next_positions + 1
        results = []
        token_lists, logprob_lists = out_tokens.tolist(), out_logprobs.tolist()
        top_id_lists, top_logprob_lists = out_top_ids.tolist(), out_top_logprobs.tolist()
        for row, length in enumerate(lengths.tolist()):
            ids = token_lists[row][:length]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            text = trim_stop_string(text, params.stop, params.include_stop_str_in_output)
            tops = (
                [
                    list(zip(top_id_lists[row][step], top_logprob_lists[row][step], strict=True))
                    for step in range(length)
                ]
                if k > 0
                else []
            )
            results.append((text, ids, logprob_lists[row][:length], reasons[row] or "length", tops))
        return results

    def _seen_tokens(self, rows: list[list[int]], params: SamplingParams) -> Optional[torch.Tensor]:
        """Bool [rows, vocab] marking each row's prompt tokens, for the repetition penalty (None when it is off)."""
        if params.repetition_penalty == 1.0:
            return None
        vocab = int(self.model.config.vocab_size)  # the width of the logits
        seen = torch.zeros((len(rows), vocab), dtype=torch.bool, device=self.device)
        for index, row in enumerate(rows):
            seen[index, torch.tensor(row, dtype=torch.long, device=self.device)] = True
        return seen

    # ----- lifecycle --------------------------------------------------------------------------------------------
    async def sleep(self, level: int = 1) -> None:
        """Level 1: weights stay (on CPU there is nothing to offload to) and caches are dropped; level 2: weights
        are discarded, so `update_weights` with every parameter must follow `wake_up`."""
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        await self.pause()
        with self._model_lock:
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
        """Copy new values into the named parameters/buffers and serve them as `version`."""
        await asyncio.to_thread(self._update_weights_locked, list(named_tensors), version)

    def _update_weights_locked(self, named_tensors: list[tuple[str, torch.Tensor]], version: int) -> None:
        with self._model_lock:
            state = dict(self.model.named_parameters(remove_duplicate=False))
            state.update(dict(self.model.named_buffers()))
            if self.adapter_merger is not None:
                plain, merged = self.adapter_merger.add(named_tensors, state)
                named_tensors = plain + merged
            elif any(parse_adapter_name(name) for name, _ in named_tensors):
                raise ValueError(
                    "update_weights got LoRA adapter tensors, but this hf engine was built without LoRA "
                    "(lora_alpha=None): set trainer.policy.model.lora.rank so the engines merge adapters"
                )
            updated = set()
            with torch.no_grad():
                for name, tensor in named_tensors:
                    if name not in state:
                        close = difflib.get_close_matches(name, list(state), n=3)
                        raise ValueError(f"update_weights: the model has no parameter '{name}'; close names: {close}")
                    target = state[name]
                    if tuple(target.shape) != tuple(tensor.shape):
                        raise ValueError(
                            f"update_weights: '{name}' has shape {tuple(tensor.shape)}, the model expects "
                            f"{tuple(target.shape)}"
                        )
                    target.copy_(tensor.to(device=target.device, dtype=target.dtype))
                    updated.add(name)
            if self._weights_discarded:
                missing = sorted(n for n, _ in self.model.named_parameters(remove_duplicate=False) if n not in updated)
                if missing:
                    raise ValueError(
                        f"update_weights after sleep(level=2) must send every parameter; missing {missing}"
                    )
                self._weights_discarded = False
            self._version = version

    async def reset_prefix_cache(self) -> None:
        """No prefix cache is kept between calls, so there is nothing to drop."""

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
