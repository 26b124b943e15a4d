"""Benchmark: `hf` engine decoding with its KV cache growing into spare columns against copying at every step.

transformers' `DynamicLayer.update` concatenates each step's keys and values onto the cache, so every decode step
copies the whole cache; the engine's `GrowingLayer` (`skyrl_train.inference.hf_kv_cache`) writes them into spare
columns. The baseline here is `GrowingLayer` with no spare columns, which reallocates and copies at every step as the
concatenation did (the engine's code is otherwise the same). Each workload decodes seeded samples (temperature 1,
`ignore_eos`) of distinct prompts of different lengths through a fresh `HFInferenceEngine` (one torch thread,
float32, freshly initialised tiny model), the two caches in alternating rounds after a warm-up round of each; the
table shows the median seconds, decode steps per second and speed-up, and a check that both sampled the same tokens
with the same logprobs guards the comparison.

- `async`: the async benchmark's model (size 2) and shape: 128 rows of 8 tokens;
- `short`, `long`: `grouped_attention.py`'s workloads (size 3, 64 rows x 16 tokens; size 7, 8 rows x 300 tokens);
- `longer`: size 7, 4 rows x 900 tokens.

Measured 2026-12-02 on 2 CPUs (load average 1.5): async 0.98x, short 0.98x (both within their rounds' spread), long
1.06x, longer 1.06x (ranges apart); same tokens and logprobs in every workload.

    python benchmarks/kv_growth.py [--workloads async short long longer] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from skyrl_train.inference import HFInferenceEngine, InferenceEngineInput, SamplingParams, hf_decode
from skyrl_train.inference.hf_kv_cache import GrowingLayer, new_kv_cache
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grouped_attention import WORKLOADS, Workload, prompts  # noqa: E402


class CopyingLayer(GrowingLayer):
    """No spare columns: every update reallocates and copies the cache, as `DynamicLayer`'s concatenation does."""

    @staticmethod
    def spare_columns(filled: int) -> int:
        return 0


CACHES = {"copy each step": CopyingLayer, "spare columns": GrowingLayer}
"""The baseline first, then the engine's."""
OWN_WORKLOADS = {
    "async": Workload(size=2, rows=128, new_tokens=8),
    **WORKLOADS,
    "longer": Workload(size=7, rows=4, new_tokens=900, mlp_ratio=4),
}


def run_once(model: Any, tokenizer: Any, layer_class: type[GrowingLayer], workload: Workload) -> dict:
    """One decode of `workload` on a fresh engine whose caches hold `layer_class` layers."""
    hf_decode.new_kv_cache = functools.partial(new_kv_cache, layer_class=layer_class)
    engine = HFInferenceEngine(model, tokenizer, max_batch_size=workload.rows)
    params = SamplingParams(max_tokens=workload.new_tokens, temperature=1.0, seed=7, ignore_eos=True)
    request = InferenceEngineInput(prompt_token_ids=prompts(tokenizer, workload.rows), sampling_params=params)
    started = time.perf_counter()
    out = asyncio.run(engine.generate(request))
    return {"seconds": time.perf_counter() - started, "tokens": out.response_ids, "logprobs": out.response_logprobs}


def measure(name: str, workload: Workload, rounds: int, tokenizer: Any) -> None:
    """Alternating rounds of both caches on `workload`; prints its table."""
    model = build_tiny_model(TinyModelSpec(size=workload.size, mlp_ratio=workload.mlp_ratio), seed=0).eval()
    for layer_class in CACHES.values():  # warm-up
        run_once(model, tokenizer, layer_class, workload)
    seconds: dict[str, list[float]] = {cache: [] for cache in CACHES}
    last: dict[str, dict] = {}
    for index in range(rounds):
        for cache in list(CACHES) if index % 2 == 0 else list(CACHES)[::-1]:
            last[cache] = run_once(model, tokenizer, CACHES[cache], workload)
            seconds[cache].append(last[cache]["seconds"])
    baseline, ours = (last[cache] for cache in CACHES)
    gap = max((abs(a - b) for x, y in zip(baseline["logprobs"], ours["logprobs"]) for a, b in zip(x, y)), default=0.0)
    median = {cache: statistics.median(values) for cache, values in seconds.items()}
    parameters = sum(p.numel() for p in model.parameters())
    print(
        f"\n{name}: tiny model size {workload.size} ({parameters / 1e6:.2f} M params), {workload.rows} rows x "
        f"{workload.new_tokens} new tokens, {rounds} rounds, 1 thread"
    )
    print(f"{'KV cache':>15} | {'median s':>8} | {'range s':>11} | {'steps/s':>7} | {'speed-up':>8}")
    for cache in CACHES:
        spread = f"{min(seconds[cache]):.3f}-{max(seconds[cache]):.3f}"
        speedup = median["copy each step"] / median[cache]
        steps = workload.new_tokens / median[cache]
        print(f"{cache:>15} | {median[cache]:>8.3f} | {spread:>11} | {steps:>7.1f} | {speedup:>7.2f}x")
    print(f"same tokens: {baseline['tokens'] == ours['tokens']}; largest logprob difference: {gap:.1e}")


def main() -> None:
    """Run every workload and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", choices=sorted(OWN_WORKLOADS), default=list(OWN_WORKLOADS))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"{os.cpu_count()} CPUs, {platform.machine()}, torch {torch.__version__}; 1-minute load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    tokenizer = build_char_tokenizer()
    for name in args.workloads:
        measure(name, OWN_WORKLOADS[name], args.rounds, tokenizer)


if __name__ == "__main__":
    main()
