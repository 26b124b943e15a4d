"""Benchmark: `hf` engine decoding with transformers' `sdpa` attention against `CPU_SDPA` (grouped-query KV heads
kept unrepeated on masked CPU calls, `skyrl_train.models.cpu_attention`).

Each workload decodes seeded samples (temperature 1, `ignore_eos`, so every row runs its whole budget) of distinct
prompts of different lengths (left-padded, hence masked) through a fresh `HFInferenceEngine`, one torch thread, float32,
on a freshly initialised tiny model (the timing does not depend on what the weights learned):

- `short`: the quickstart's scale: tiny model size 3, 64 rows, 16 new tokens;
- `long`: the long-response shape's scale (`vs_trl.py --shape long`): its architecture (tiny model size 7, MLP ratio
  4: about 21 M parameters), 8 rows (one engine's share of 16), 300 new tokens.

The two attentions run in alternating rounds after a warm-up round of each, so a drift of the machine hits both
alike; the table shows each one's median seconds, the decode steps per second and the speed-up, and a check that both
sampled the same tokens with the same logprobs guards the comparison.

    python benchmarks/grouped_attention.py [--workloads short long] [--rounds 5] [--new-tokens N] [--out DIR]

`--new-tokens` replaces every workload's token budget (a quick check; the published table uses the defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from skyrl_train.inference import HFInferenceEngine, InferenceEngineInput, SamplingParams
from skyrl_train.models.cpu_attention import CPU_SDPA
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer

ATTENTIONS = ("sdpa", CPU_SDPA)
"""The baseline (transformers' own) first, then ours."""


@dataclass(frozen=True)
class Workload:
    """A decode to time: the tiny model's size, how many rows and how many tokens each."""

    size: int
    rows: int
    new_tokens: int
    mlp_ratio: int = 3


WORKLOADS = {
    "short": Workload(size=3, rows=64, new_tokens=16),
    "long": Workload(size=7, rows=8, new_tokens=300, mlp_ratio=4),
}


def prompts(tokenizer: Any, count: int) -> list[list[int]]:
    """`count` chat prompts of different lengths."""
    rendered = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"Convert {17 ** (i % 9 + 1)} to binary."}], add_generation_prompt=True
        )
        for i in range(count)
    ]
    return [list(r["input_ids"] if hasattr(r, "keys") else r) for r in rendered]


def run_once(model: Any, tokenizer: Any, attention: str, workload: Workload) -> dict:
    """One decode of `workload` with `attention` on a fresh engine: seconds, tokens and logprobs."""
    engine = HFInferenceEngine(model, tokenizer, max_batch_size=workload.rows)
    model.set_attn_implementation(attention)  # the engine switched it to CPU_SDPA; the baseline switches back
    params = SamplingParams(max_tokens=workload.new_tokens, temperature=1.0, seed=7, ignore_eos=True)
    request = InferenceEngineInput(prompt_token_ids=prompts(tokenizer, workload.rows), sampling_params=params)
    started = time.perf_counter()
    out = asyncio.run(engine.generate(request))
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "tokens": out.response_ids, "logprobs": out.response_logprobs}


def measure(name: str, workload: Workload, rounds: int, tokenizer: Any) -> dict:
    """Alternating rounds of both attentions on `workload`; prints and returns its rows."""
    model = build_tiny_model(TinyModelSpec(size=workload.size, mlp_ratio=workload.mlp_ratio), seed=0).eval()
    for attention in ATTENTIONS:  # warm-up
        run_once(model, tokenizer, attention, workload)
    seconds: dict[str, list[float]] = {attention: [] for attention in ATTENTIONS}
    last: dict[str, dict] = {}
    for index in range(rounds):
        for attention in ATTENTIONS if index % 2 == 0 else ATTENTIONS[::-1]:
            last[attention] = run_once(model, tokenizer, attention, workload)
            seconds[attention].append(last[attention]["seconds"])
    baseline, ours = (last[attention] for attention in ATTENTIONS)
    same_tokens = baseline["tokens"] == ours["tokens"]
    logprob_gap = max(
        (abs(a - b) for x, y in zip(baseline["logprobs"], ours["logprobs"]) for a, b in zip(x, y)), default=0.0
    )
    parameters = sum(p.numel() for p in model.parameters())
    median = {attention: statistics.median(values) for attention, values in seconds.items()}
    print(
        f"\n{name}: tiny model size {workload.size} ({parameters / 1e6:.1f} M params), {workload.rows} rows x "
        f"{workload.new_tokens} new tokens, {rounds} rounds, 1 thread"
    )
    print(f"{'attention':>18} | {'median s':>8} | {'range s':>11} | {'steps/s':>7} | {'speed-up':>8}")
    print("-" * 66)
    rows = []
    for attention in ATTENTIONS:
        speedup = median["sdpa"] / median[attention]
        spread = f"{min(seconds[attention]):.2f}-{max(seconds[attention]):.2f}"
        steps = workload.new_tokens / median[attention]
        print(f"{attention:>18} | {median[attention]:>8.2f} | {spread:>11} | {steps:>7.1f} | {speedup:>7.2f}x")
        rows.append({"attention": attention, "seconds": seconds[attention], "median_s": median[attention]})
    print(f"same tokens: {same_tokens}; largest logprob difference: {logprob_gap:.1e}")
    return {
        "workload": name,
        "size": workload.size,
        "mlp_ratio": workload.mlp_ratio,
        "parameters": parameters,
        "rows": workload.rows,
        "new_tokens": workload.new_tokens,
        "results": rows,
        "same_tokens": same_tokens,
        "max_logprob_difference": logprob_gap,
    }


def main() -> None:
    """Run every workload and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=None, help="every workload's token budget (default: its own)")
    parser.add_argument("--out", type=Path, default=None, help="write grouped_attention.json here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    tokenizer = build_char_tokenizer()
    workloads = {name: WORKLOADS[name] for name in args.workloads}
    if args.new_tokens is not None:
        workloads = {name: replace(workload, new_tokens=args.new_tokens) for name, workload in workloads.items()}
    runs = [measure(name, workload, args.rounds, tokenizer) for name, workload in workloads.items()]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {
            "benchmark": "benchmarks/grouped_attention.py",
            "date": datetime.date.today().isoformat(),
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, torch {torch.__version__}, 1 torch thread",
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "rounds": args.rounds,
            "runs": runs,
        }
        (args.out / "grouped_attention.json").write_text(json.dumps(record, indent=1))
        print(f"results: {args.out / 'grouped_attention.json'}")


if __name__ == "__main__":
    main()
