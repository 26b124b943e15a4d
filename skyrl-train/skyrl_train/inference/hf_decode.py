"""Continuous batching for the `hf` engine: `DecodeBatch` holds the rows decoding together over one KV cache.

Rows join between decode steps (their prompts are prefilled on their own, each distinct prompt once, then their cache
is left-padded and stacked with the batch's) and leave as soon as they stop, so a caller whose completion is done gets it at once and a
request that arrives mid-decode starts at the next step instead of waiting for the whole batch. Every row carries its
own positions, attention columns, budget and sampling numbers, so its tokens do not depend on the rows it shares the
batch with (up to float summation order).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch.nn import functional
from transformers import DynamicCache, PreTrainedModel

from skyrl_train.inference.hf_kv_cache import GrowingLayer, new_kv_cache
from skyrl_train.inference.hf_prefix_cache import CachedPrefix, PrefixCache
from skyrl_train.inference.sampling import sample_next_tokens, seeded_uniforms, top_logprobs
from skyrl_train.inference.stopping import StopChecker
from skyrl_train.inference.types import SamplingParams


@dataclass
class DecodeRow:
    """One sequence to generate and what it generated so far.

    Its sampling (inverse CDF) uses `uniforms` ([budget] in [0, 1)) when given, else the SplitMix64 stream of `seed`
    (`sampling.seeded_uniforms`), else numbers from torch's global generator; `tag` is the caller's.
    `reason` is set ("stop" or "length") when the row finished. `versions` holds, per generated token, the weight
    version whose forward produced the distribution it was sampled from (they differ after an in-flight update).
    """

    prompt: list[int]
    budget: int
    uniforms: Optional[torch.Tensor] = None
    tag: Any = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tops: list[list[tuple[int, float]]] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    reason: Optional[str] = None
    seed: Optional[int] = None
    session: Optional[Hashable] = None
    """The conversation the row belongs to: with a `PrefixCache`, its prompt may reuse the keys and values the
    session's previous row left there, and it leaves its own when it finishes."""


def _left_pad_columns(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """Zero-pad `tensor` on the left of `dim` up to `width`."""
    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    pad = [0, 0] * (tensor.dim() - 1 - dim % tensor.dim()) + [missing, 0]
    return functional.pad(tensor, pad)


class DecodeBatch:
    """Rows sampled with one set of `SamplingParams` (seeds aside), decoding one token per `step()`.

    `admit(rows)` prefills new rows and adds them (between steps); `step()` samples the next token of every live
    row, returns the rows that finished (removed from the batch) and runs the model once for the rest. `version` is
    the weight version that computed the cache and the next-token logits; after the model's weights change between
    steps, `recompute(version)` rebuilds both from every row's prompt and tokens so far. With a `prefix_cache`, a row
    with a `session` prefills only what its session's kept keys and values do not cover, and leaves its own there
    when it finishes.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        params: SamplingParams,
        stop_ids: set[int],
        pad_token_id: int,
        tokenizer: Any,
        version: int = 0,
        prefix_cache: Optional[PrefixCache] = None,
    ) -> None:
        self.model = model
        self.version = version
        self.params = params
        self.pad_token_id = pad_token_id
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.stop_tensor = torch.tensor(sorted(stop_ids), dtype=torch.long, device=self.device)
        self.top_k = min(params.top_logprobs, int(model.config.vocab_size))
        self.stop_strings = StopChecker(params, set(), params.max_tokens) if params.stop else None
        self.stop_window = 4 * max(map(len, params.stop)) + 8 if params.stop else 0
        """Trailing tokens decoded for the stop-string check: a stop string the newest token completes lies within
        them (a character takes at most 4 byte-level tokens), so a step decodes a bounded tail, not the whole row."""
        self.rows: list[DecodeRow] = []
        self.cache: Optional[DynamicCache] = None
        self.attention: Optional[torch.Tensor] = None  # [rows, cache columns]: 1 where a row has a real token
        self.positions: Optional[torch.Tensor] = None  # [rows]: the position of the token fed next
        self.logits: Optional[torch.Tensor] = None  # [rows, vocab]: what the next token is sampled from
        self.seen: Optional[torch.Tensor] = None  # [rows, vocab] for the repetition penalty, else None
        self.uniforms: Optional[torch.Tensor] = None  # [rows, longest budget], None when greedy
        self.generated: Optional[torch.Tensor] = None  # [rows]: tokens generated so far (the uniforms' column)
        self.joinable = True
        """False when the model's cache is not a plain dynamic one (e.g. sliding windows): rows join only while the
        batch is empty."""
        plain_cache = all(isinstance(layer, GrowingLayer) for layer in new_kv_cache(model.config).layers)
        self.prefix_cache = prefix_cache if plain_cache else None
        """Where rows with a session find and leave their keys and values (None: off, or a cache that is not plain
        dynamic layers, e.g. sliding windows, whose kept columns would not be the whole prefix)."""

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def accepts_new_rows(self) -> bool:
        """Whether `admit` may be called now."""
        return self.joinable or not self.rows

    # ----- joining ------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def admit(self, rows: list[DecodeRow]) -> None:
        """Prefill `rows` and add them to the batch (their first token is sampled by the next `step`)."""
        if not rows:
            return
        if not self.accepts_new_rows:
            raise RuntimeError("this model's KV cache cannot take rows mid-decode; wait for the batch to finish")
        cached: list[tuple[DecodeRow, CachedPrefix, int]] = []
        fresh: list[DecodeRow] = []
        if self.prefix_cache is not None and any(row.session is not None for row in rows):
            self.prefix_cache.check_weights()
        for row in rows:
            found = None
            if self.prefix_cache is not None and row.session is not None:
                found = self.prefix_cache.take(row.session, row.prompt, self.version)
            if found is None:
                fresh.append(row)
            else:
                cached.append((row, *found))
        if fresh:
            # Rows that repeat a prompt (the samples of one group) share its prefill: each distinct prompt runs once
            # and its cache, logits and columns are copied to every row that asked for it.
            self._join(fresh, *self._prefill([row.prompt for row in fresh]))
        if cached:
            self._join([row for row, _, _ in cached], *self._extend(cached))

    def _join(
        self,
        rows: list[DecodeRow],
        cache: DynamicCache,
        logits: torch.Tensor,
        attention: torch.Tensor,
        positions: torch.Tensor,
    ) -> None:
        """Add prefilled `rows` (their cache, last logits, attention columns and positions) to the batch."""
        width = attention.shape[1]
        seen = self._seen_tokens(rows)
        uniforms = self._stack_uniforms(rows)
        if not self.rows:
            self.rows, self.cache, self.attention, self.logits = list(rows), cache, attention, logits
            self.positions, self.seen, self.uniforms = positions[:, -1] + 1, seen, uniforms
            self.generated = torch.zeros(len(rows), dtype=torch.long, device=self.device)
            self.joinable = all(isinstance(layer, GrowingLayer) for layer in cache.layers)
            return
        columns = max(self.attention.shape[1], width)
        for old, new in zip(self.cache.layers, cache.layers, strict=True):
            old.join_left_padded(new, columns)
        self.attention = torch.cat(
            [_left_pad_columns(self.attention, columns, 1), _left_pad_columns(attention, columns, 1)]
        )
        self.logits = torch.cat([self.logits, logits])
        self.positions = torch.cat([self.positions, positions[:, -1] + 1])
        self.generated = torch.cat([self.generated, self.generated.new_zeros(len(rows))])
        if self.seen is not None:
            self.seen = torch.cat([self.seen, seen])
        if self.uniforms is not None:
            longest = max(self.uniforms.shape[1], uniforms.shape[1])
            self.uniforms = torch.cat(
                [
                    functional.pad(self.uniforms, (0, longest - self.uniforms.shape[1])),
                    functional.pad(uniforms, (0, longest - uniforms.shape[1])),
                ]
            )
        self.rows.extend(rows)

    def _prefill(self, sequences: list[list[int]]) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run `sequences` (left-padded) through the model: their cache, last logits, attention columns and positions.
        Equal sequences (the samples of one group) run once; their cache, logits and columns are copied."""
        distinct: dict[tuple[int, ...], int] = {}
        row_sequence = [distinct.setdefault(tuple(sequence), len(distinct)) for sequence in sequences]
        unique = list(distinct)
        width = max(len(sequence) for sequence in unique)
        input_ids = torch.full((len(unique), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(unique), width), dtype=torch.long)
        for index, sequence in enumerate(unique):
            input_ids[index, width - len(sequence) :] = torch.tensor(sequence)
            attention[index, width - len(sequence) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        if self.prefix_cache is not None:
            self.prefix_cache.prefilled_tokens += sum(len(sequence) for sequence in unique)
        cache = new_kv_cache(self.model.config)
        logits = self._last_logits(input_ids, attention, positions, cache)
        if len(unique) < len(sequences):
            expand = torch.tensor(row_sequence, dtype=torch.long, device=self.device)
            cache.batch_select_indices(expand)
            logits, attention, positions = logits[expand], attention[expand], positions[expand]
        return cache, logits, attention, positions

    def _extend(
        self, cached: list[tuple[DecodeRow, CachedPrefix, int]]
    ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Prefill rows whose first `reuse` prompt tokens have kept keys and values: those are stacked (left-padded)
        as the cache, and only the rest of each prompt (left-padded after them) runs through the model. Returns what
        `_prefill` does; a row's columns may hold a gap of padding between its kept and its new tokens, which its
        attention mask and positions skip."""
        kept = max(reuse for _, _, reuse in cached)
        width = max(len(row.prompt) - reuse for row, _, reuse in cached)
        count = len(cached)
        input_ids = torch.full((count, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((count, kept + width), dtype=torch.long)
        positions = torch.zeros((count, width), dtype=torch.long)
        for index, (row, _, reuse) in enumerate(cached):
            new = row.prompt[reuse:]
            input_ids[index, width - len(new) :] = torch.tensor(new)
            attention[index, kept - reuse : kept] = 1
            attention[index, kept + width - len(new) :] = 1
            positions[index, width - len(new) :] = torch.arange(reuse, len(row.prompt))
        self.prefix_cache.prefilled_tokens += sum(len(row.prompt) - reuse for row, _, reuse in cached)
        cache = new_kv_cache(self.model.config)
        for layer in range(len(cache.layers)):
            stacked = []
            for part in ("keys", "values"):
                first = getattr(cached[0][1], part)[layer]
                columns = first.new_zeros((count, first.shape[0], kept, first.shape[-1]))
                for index, (_, entry, reuse) in enumerate(cached):
                    columns[index, :, kept - reuse :] = getattr(entry, part)[layer][:, :reuse]
                stacked.append(columns.to(self.device))
            cache.update(*stacked, layer)
        attention, positions = attention.to(self.device), positions.to(self.device)
        return cache, self._last_logits(input_ids.to(self.device), attention, positions, cache), attention, positions

    def _last_logits(
        self, input_ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor, cache: DynamicCache
    ) -> torch.Tensor:
        """Run `input_ids` after what `cache` holds (which it extends) and return each row's last-position logits:
        the full [rows, width, vocab] of a real vocabulary would be the largest tensor of a prefill."""
        return self.model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1, :]

    def _keep_prefixes(self, finished: list[tuple[int, DecodeRow]]) -> None:
        """Leave the keys and values of finished rows that have a session in the prefix cache: their prompt and every
        token but the last (which was sampled, never fed)."""
        if self.prefix_cache is None or all(row.session is None for _, row in finished):
            return
        self.prefix_cache.check_weights()
        for index, row in finished:
            if row.session is None:
                continue
            real = self.attention[index].bool()
            tokens = row.prompt + row.tokens[:-1]
            if int(real.sum()) != len(tokens):  # not this row's whole prefix (never expected): keep nothing
                continue
            # boolean-mask indexing already copies: the kept tensors share no storage with the batch's cache
            keys = [layer.keys[index][:, real] for layer in self.cache.layers]
            values = [layer.values[index][:, real] for layer in self.cache.layers]
            self.prefix_cache.put(row.session, CachedPrefix(tokens, keys, values, self.version))

    @torch.inference_mode()
    def recompute(self, version: int) -> None:
        """After the model's weights changed between steps (an in-flight update to `version`): rebuild the KV cache and
        next-token logits of every live row from its prompt and the tokens it generated so far, so its next tokens
        are sampled from the new weights exactly as a fresh request with that prefix would be."""
        self.version = version
        if not self.rows:
            return
        self.cache, self.logits, self.attention, positions = self._prefill(
            [row.prompt + row.tokens for row in self.rows]
        )
        self.positions = positions[:, -1] + 1

    def _seen_tokens(self, rows: list[DecodeRow]) -> Optional[torch.Tensor]:
        """Bool [rows, vocab] marking each row's prompt tokens (None when the repetition penalty is off)."""
        if self.params.repetition_penalty == 1.0:
            return None
        seen = torch.zeros((len(rows), int(self.model.config.vocab_size)), dtype=torch.bool, device=self.device)
        for index, row in enumerate(rows):
            seen[index, torch.tensor(row.prompt, dtype=torch.long, device=self.device)] = True
        return seen

    def _stack_uniforms(self, rows: list[DecodeRow]) -> Optional[torch.Tensor]:
        if self.params.temperature == 0:
            return None
        longest = max(row.budget for row in rows)
        stacked = torch.zeros((len(rows), longest))
        seeded = [index for index, row in enumerate(rows) if row.uniforms is None and row.seed is not None]
        if seeded:  # one counter-based call for every seeded row (all of the engine's seeded requests)
            stacked[seeded] = seeded_uniforms([rows[index].seed for index in seeded], longest)
        for index, row in enumerate(rows):
            if row.uniforms is not None:
                stacked[index, : row.budget] = row.uniforms[: row.budget]
            elif row.seed is None:
                stacked[index, : row.budget] = torch.rand(row.budget)
        return stacked.to(self.device)

    # ----- decoding -----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[DecodeRow]:
        """Sample one token for every live row; return the rows that finished (they leave the batch)."""
        if not self.rows:
            return []
        count = len(self.rows)
        rows_index = torch.arange(count, device=self.device)
        uniforms = None if self.uniforms is None else self.uniforms[rows_index, self.generated]
        tokens, logprobs = sample_next_tokens(self.logits, self.params, uniforms=uniforms, seen=self.seen)
        if self.top_k > 0:
            top_values, top_ids = top_logprobs(self.logits, self.params, self.top_k, self.seen)
            top_pairs = [list(zip(i, v, strict=True)) for i, v in zip(top_ids.tolist(), top_values.tolist())]
        if self.seen is not None:
            self.seen[rows_index, tokens] = True
        self.generated += 1
        stopped = torch.isin(tokens, self.stop_tensor).tolist() if self.stop_tensor.numel() else [False] * count
        keep: list[int] = []
        leaving: list[tuple[int, DecodeRow]] = []
        for index, (row, token, logprob) in enumerate(zip(self.rows, tokens.tolist(), logprobs.float().tolist())):
            row.tokens.append(token)
            row.logprobs.append(logprob)
            row.versions.append(self.version)
            if self.top_k > 0:
                row.tops.append(top_pairs[index])
            stop = stopped[index] or (
                self.stop_strings is not None and self.stop_strings.check([], self._tail_text(row.tokens))
            )
            if stop or len(row.tokens) >= row.budget:
                row.reason = "stop" if stop else "length"
                leaving.append((index, row))
            else:
                keep.append(index)
        self._keep_prefixes(leaving)
        finished = [row for _, row in leaving]
        if not keep:
            self._clear()
            return finished
        if finished:
            self._select(torch.tensor(keep, device=self.device))
            tokens = tokens[keep]
        self.attention = torch.cat([self.attention, self.attention.new_ones((len(keep), 1))], dim=1)
        self.logits = self.model(
            input_ids=tokens.unsqueeze(1),
            attention_mask=self.attention,
            position_ids=self.positions.unsqueeze(1),
            past_key_values=self.cache,
            use_cache=True,
        ).logits[:, -1, :]
        self.positions = self.positions + 1
        return finished

    def _tail_text(self, tokens: list[int]) -> str:
        """The text of a row's last `stop_window` tokens, special tokens skipped as in the text the caller gets (so
        a stop string matches what vLLM's detokenized output would show)."""
        return self.tokenizer.decode(tokens[-self.stop_window :], skip_special_tokens=True)

    def _select(self, keep: torch.Tensor) -> None:
        """Keep the rows at `keep`; drop the cache columns no remaining row attends to (left padding)."""
        self.rows = [self.rows[index] for index in keep.tolist()]
        self.cache.batch_select_indices(keep)
        self.attention, self.logits, self.positions = self.attention[keep], self.logits[keep], self.positions[keep]
        self.generated = self.generated[keep]
        if self.seen is not None:
            self.seen = self.seen[keep]
        if self.uniforms is not None:
            self.uniforms = self.uniforms[keep]
        if self.joinable:
            first = int(self.attention.any(dim=0).nonzero()[0])
            if first > 0:
                self.attention = self.attention[:, first:]
                for layer in self.cache.layers:
                    layer.drop_left_columns(first)

    def _clear(self) -> None:
        self.rows, self.cache, self.attention, self.positions = [], None, None, None
        self.logits = self.seen = self.uniforms = self.generated = None
        self.joinable = True
