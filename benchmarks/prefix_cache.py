"""Benchmark: multi-turn rollouts through the `hf` engine with its prefix cache on and off.

Each conversation is one session: a chat prompt, then `--turns` turns that each ask for `--new-tokens` tokens and
append the response and a `--observation-tokens`-token observation (what an env's reply adds) to the conversation
before the next call, the way the multi-turn generator sends whole conversations. `--sessions` conversations run
concurrently (each generate call waits for others to join, as the generator's do), greedy, one torch thread, in
float32. The two settings run in alternating rounds after a warm-up round of each, so a drift of the machine hits both
alike; the table shows each setting's median seconds, the tokens prefilled, and the cache's speed-up. A check that
both settings produced the same tokens guards the comparison.

    python benchmarks/prefix_cache.py [--size 3] [--sessions 64] [--turns 4] [--new-tokens 8]
        [--observation-tokens 12] [--rounds 5] [--out DIR]
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
from pathlib import Path
from typing import Any

import torch

from skyrl_train.inference import HFInferenceEngine, InferenceEngineInput, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer

SETTINGS = {"off": False, "on": True}
"""Setting name -> `enable_prefix_caching`."""


def first_prompts(tokenizer: Any, count: int) -> list[list[int]]:
    """One chat prompt per session (distinct questions)."""
    rendered = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"Add {i} and {7 * i + 3}."}], add_generation_prompt=True
        )
        for i in range(count)
    ]
    return [list(r["input_ids"] if hasattr(r, "keys") else r) for r in rendered]


async def conversations(
    engine: HFInferenceEngine, prompts: list[list[int]], args: argparse.Namespace
) -> list[list[int]]:
    """Run every session's turns concurrently; returns each session's final conversation."""
    params = SamplingParams(max_tokens=args.new_tokens, temperature=0, ignore_eos=True)

    async def session(index: int, prompt: list[int]) -> list[int]:
        context = list(prompt)
        for turn in range(args.turns):
            request = InferenceEngineInput(prompt_token_ids=[context], sampling_params=params, session_ids=[index])
            out = await engine.generate(request)
            observation = [(index + turn + k) % 50 + 10 for k in range(args.observation_tokens)]
            context += out.response_ids[0] + observation
        return context

    return await asyncio.gather(*(session(i, p) for i, p in enumerate(prompts)))


def run_once(model: Any, tokenizer: Any, prompts: list[list[int]], enabled: bool, args: argparse.Namespace) -> dict:
    """One round of one setting on a fresh engine: seconds, prompt tokens prefilled, and the conversations."""
    engine = HFInferenceEngine(model, tokenizer, max_batch_size=args.sessions, enable_prefix_caching=enabled)
    started = time.perf_counter()
    final = asyncio.run(conversations(engine, prompts, args))
    seconds = time.perf_counter() - started
    prefilled = engine.prefix_cache.prefilled_tokens if engine.prefix_cache is not None else None
    return {"seconds": seconds, "prefilled": prefilled, "conversations": final}


def main() -> None:
    """Run the rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=3, help="tiny model size dial")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--observation-tokens", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="write prefix_cache.json here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(TinyModelSpec(size=args.size), seed=0).eval()
    prompts = first_prompts(tokenizer, args.sessions)
    for enabled in SETTINGS.values():  # warm-up
        run_once(model, tokenizer, prompts[:4], enabled, args)
    seconds: dict[str, list[float]] = {name: [] for name in SETTINGS}
    results: dict[str, dict] = {}
    for _ in range(args.rounds):
        for name, enabled in SETTINGS.items():
            results[name] = run_once(model, tokenizer, prompts, enabled, args)
            seconds[name].append(results[name]["seconds"])
    same = results["on"]["conversations"] == results["off"]["conversations"]
    all_prompt_tokens = sum(
        len(conversation) - (args.turns - turn) * (args.new_tokens + args.observation_tokens)
        for conversation in results["off"]["conversations"]
        for turn in range(args.turns)
    )
    median = {name: statistics.median(values) for name, values in seconds.items()}
    params = sum(p.numel() for p in model.parameters())
    print(
        f"tiny model size={args.size} ({params / 1e6:.2f} M params), {args.sessions} sessions x {args.turns} turns of "
        f"{args.new_tokens} new + {args.observation_tokens} observation tokens, {args.rounds} rounds, 1 thread"
    )
    print(
        f"{'prefix cache':>12} | {'median s':>8} | {'range s':>13} | {'prompt tokens prefilled':>23} | {'speed-up':>8}"
    )
    print("-" * 78)
    rows = []
    for name in SETTINGS:
        prefilled = results[name]["prefilled"] if results[name]["prefilled"] is not None else all_prompt_tokens
        speedup = median["off"] / median[name]
        spread = f"{min(seconds[name]):.2f}-{max(seconds[name]):.2f}"
        print(f"{name:>12} | {median[name]:>8.2f} | {spread:>13} | {prefilled:>23,} | {speedup:>7.2f}x")
        rows.append({"setting": name, "seconds": seconds[name], "median_s": median[name], "prefilled": prefilled})
    print(f"same tokens with and without the cache: {same}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {
            "benchmark": "benchmarks/prefix_cache.py",
            "date": datetime.date.today().isoformat(),
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, torch {torch.__version__}, 1 torch thread",
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "model": {"size": args.size, "parameters": params},
            "workload": {
                "sessions": args.sessions,
                "turns": args.turns,
                "new_tokens": args.new_tokens,
                "observation_tokens": args.observation_tokens,
            },
            "rounds": args.rounds,
            "rows": rows,
            "same_tokens": same,
        }
        (args.out / "prefix_cache.json").write_text(json.dumps(record, indent=1))
        print(f"results: {args.out / 'prefix_cache.json'}")


if __name__ == "__main__":
    main()
