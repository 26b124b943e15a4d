"""`InferenceEngineClient`: one engine-shaped front over N engines, with session affinity for multi-turn calls."""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import AsyncIterator, Iterable
from typing import Optional, Union

import torch

from skyrl_train.inference.base import InferenceEngine
from skyrl_train.inference.types import InferenceEngineInput, InferenceEngineOutput


def _stable_hash(session_id: Union[str, int]) -> int:
    return zlib.crc32(str(session_id).encode())


class InferenceEngineClient:
    """Route generate calls over engines and fan lifecycle calls (sleep, wake, pause, resume, weights) out to all.

    Prompts that carry a session id always go to the same engine (`crc32(session_id) % num_engines`), so every turn
    of a conversation hits the engine that holds its prefix. Prompts without one are split into near-equal contiguous
    parts, one per engine, with equal prompts (the samples of a GRPO group) kept next to each other, so a group
    lands on one engine and is prefilled once instead of once per engine; a call with a single such prompt goes to
    the engines in turn (round-robin).
    """

    def __init__(self, engines: list[InferenceEngine]) -> None:
        if not engines:
            raise ValueError("InferenceEngineClient needs at least one engine")
        self.engines = list(engines)
        self._round_robin = itertools.cycle(range(len(self.engines)))

    def engine_for(self, session_id: Optional[Union[str, int]]) -> int:
        """Index of the engine that serves this session (round-robin when there is none)."""
        if session_id is None:
            return next(self._round_robin)
        return _stable_hash(session_id) % len(self.engines)

    async def generate(self, request: InferenceEngineInput) -> InferenceEngineOutput:
        """Split the prompts across engines, run the parts concurrently, and reassemble them in prompt order."""
        parts = await asyncio.gather(*(self._run_part(request, e, idx) for e, idx in self._assign(request).items()))
        return merge_parts(request.num_prompts, request.sampling_params.n, parts)

    async def generate_parts(
        self, request: InferenceEngineInput
    ) -> AsyncIterator[tuple[list[int], InferenceEngineOutput]]:
        """`generate` one engine's part at a time, in the order the engines finish: `(indices, output)` with the
        indices of the prompts that engine served (in the order of its output, `n` rows each). A caller that has work
        per row (scoring, stepping envs) starts on the first engine's rows while the others still decode. Parts not
        yet taken are cancelled if the caller stops early (use `contextlib.aclosing`)."""
        calls = [asyncio.ensure_future(self._run_part(request, e, idx)) for e, idx in self._assign(request).items()]
        try:
            for done in asyncio.as_completed(calls):
                yield await done
        finally:
            for call in calls:
                call.cancel()

    def _assign(self, request: InferenceEngineInput) -> dict[int, list[int]]:
        """Engine index -> the indices of the prompts it serves (by session, else contiguous parts)."""
        sessions = request.session_ids or [None] * request.num_prompts
        assignment: dict[int, list[int]] = {}
        unrouted = []
        for index in range(request.num_prompts):
            if sessions[index] is None:
                unrouted.append(index)
            else:
                assignment.setdefault(self.engine_for(sessions[index]), []).append(index)
        if unrouted:  # a single prompt makes one part: the engines then take such calls in turn
            first = next(self._round_robin)
            for offset, part in enumerate(self._contiguous_parts(request, unrouted)):
                assignment.setdefault((first + offset) % len(self.engines), []).extend(part)
        return assignment

    async def _run_part(
        self, request: InferenceEngineInput, engine_index: int, indices: list[int]
    ) -> tuple[list[int], InferenceEngineOutput]:
        part = InferenceEngineInput(
            prompt_token_ids=[request.prompt_token_ids[i] for i in indices] if request.prompt_token_ids else None,
            prompts=[request.prompts[i] for i in indices] if request.prompts else None,
            sampling_params=request.sampling_params,
            session_ids=[request.session_ids[i] for i in indices] if request.session_ids else None,
            seeds=[request.seeds[i] for i in indices] if request.seeds is not None else None,
        )
        return indices, await self.engines[engine_index].generate(part)

    def _contiguous_parts(self, request: InferenceEngineInput, indices: list[int]) -> list[list[int]]:
        """`indices` ordered so equal prompts sit together (first appearance order), cut into one near-equal
        contiguous part per engine (fewer when there are fewer prompts than engines; no part is empty)."""
        groups: dict[Union[tuple, str], list[int]] = {}
        for index in indices:
            if request.prompt_token_ids is not None:
                key: Union[tuple, str] = tuple(request.prompt_token_ids[index])
            else:  # chat messages: lists of dicts, compared by their text
                key = repr(request.prompts[index]) if request.prompts is not None else ""
            groups.setdefault(key, []).append(index)
        ordered = [index for group in groups.values() for index in group]
        parts = min(len(self.engines), len(ordered))
        cuts = [len(ordered) * part // parts for part in range(parts + 1)]
        return [ordered[start:end] for start, end in zip(cuts, cuts[1:])]

    @property
    def weight_versions(self) -> list[int]:
        """The weight version each engine serves."""
        return [engine.weight_version for engine in self.engines]

    async def sleep(self, level: int = 1) -> None:
        """Put every engine to sleep."""
        await asyncio.gather(*(e.sleep(level) for e in self.engines))

    async def wake_up(self) -> None:
        """Wake every engine."""
        await asyncio.gather(*(e.wake_up() for e in self.engines))

    async def pause(self) -> None:
        """Pause every engine (returns when all in-flight calls finished)."""
        await asyncio.gather(*(e.pause() for e in self.engines))

    async def resume(self) -> None:
        """Resume every engine."""
        await asyncio.gather(*(e.resume() for e in self.engines))

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Send the same weights to every engine."""
        tensors = list(named_tensors)
        await asyncio.gather(*(e.update_weights(tensors, version) for e in self.engines))

    async def reset_prefix_cache(self) -> None:
        """Drop every engine's prefix cache."""
        await asyncio.gather(*(e.reset_prefix_cache() for e in self.engines))

    async def weights_checksums(self) -> list[dict[str, float]]:
        """Each engine's parameter checksums."""
        return list(await asyncio.gather(*(e.weights_checksum() for e in self.engines)))

    async def teardown(self) -> None:
        """Tear every engine down."""
        await asyncio.gather(*(e.teardown() for e in self.engines))


def merge_parts(count: int, n: int, parts: Iterable[tuple[list[int], InferenceEngineOutput]]) -> InferenceEngineOutput:
    """One output for `count` prompts (`n` rows each, prompt-major) from the engines' parts, each `(indices of the
    prompts it served, its output)`; the weight version is the oldest any part sampled with."""
    slots: list = [None] * count
    versions = set()
    for indices, output in parts:
        versions.add(output.weight_version)
        for position, prompt_index in enumerate(indices):
            rows = range(position * n, (position + 1) * n)
            slots[prompt_index] = [
                (
                    output.responses[r],
                    output.response_ids[r],
                    output.stop_reasons[r],
                    output.response_logprobs[r] if output.response_logprobs is not None else None,
                    output.response_top_logprobs[r] if output.response_top_logprobs is not None else None,
                    output.response_token_versions[r] if output.response_token_versions is not None else None,
                )
                for r in rows
            ]
    flat = [row for prompt_rows in slots for row in prompt_rows]
    logprobs = [row[3] for row in flat]
    tops = [row[4] for row in flat]
    token_versions = [row[5] for row in flat]
    return InferenceEngineOutput(
        responses=[row[0] for row in flat],
        response_ids=[row[1] for row in flat],
        stop_reasons=[row[2] for row in flat],
        response_logprobs=None if any(lp is None for lp in logprobs) else logprobs,
        response_top_logprobs=None if any(top is None for top in tops) else tops,
        weight_version=min(versions),
        response_token_versions=None if any(v is None for v in token_versions) else token_versions,
    )


async def prefix_cache_metrics(engines: Iterable[InferenceEngine]) -> dict[str, float]:
    """`generate/prefix_cache_*` metrics from the engines' cache counts since the last call, summed over engines:
    the share of a conversation's turns that found its earlier turns' keys and values (`hit_rate`), and the prompt
    tokens reused and prefilled. `{}` when no engine reports counts (no hf engine, or its cache off)."""
    counts: dict[str, int] = {}
    for engine_counts in await asyncio.gather(*(engine.take_cache_counts() for engine in engines)):
        for name, count in engine_counts.items():
            counts[name] = counts.get(name, 0) + count
    if not counts:
        return {}
    lookups = counts["hits"] + counts["misses"]
    metrics = {
        "generate/prefix_cache_reused_tokens": float(counts["reused_tokens"]),
        "generate/prefix_cache_prefilled_tokens": float(counts["prefilled_tokens"]),
    }
    if lookups:
        metrics["generate/prefix_cache_hit_rate"] = counts["hits"] / lookups
    return metrics
