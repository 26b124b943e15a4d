"""Benchmark: the embedded `hf` engine against plain `model.generate` on the tiny model, tokens/s per batch size.

Both sample at temperature 1 for exactly `--new-tokens` tokens (eos ignored) from the same chat prompts, with one
torch thread, in one process; the table reports each one's tokens/s and the engine's speed-up as a ratio.

    python benchmarks/engine_throughput.py [--size 3] [--batch-sizes 1 8 32 64] [--new-tokens 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import torch

from skyrl_train.inference import HFInferenceEngine, InferenceEngineInput, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer


def _prompts(tokenizer, count: int) -> list[list[int]]:
    rendered = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"What is {i}+{3 * i + 7}?"}], add_generation_prompt=True
        )
        for i in range(count)
    ]
    return [list(r["input_ids"] if hasattr(r, "keys") else r) for r in rendered]


def _time_hf_generate(model, tokenizer, prompts: list[list[int]], new_tokens: int) -> float:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            pad_token_id=tokenizer.pad_token_id,
        )
    elapsed = time.perf_counter() - start
    assert out.shape[1] - width == new_tokens
    return elapsed


def _time_engine(engine, prompts: list[list[int]], new_tokens: int) -> float:
    params = SamplingParams(max_tokens=new_tokens, temperature=1.0, ignore_eos=True)
    start = time.perf_counter()
    out = asyncio.run(engine.generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params)))
    elapsed = time.perf_counter() - start
    assert all(len(ids) == new_tokens for ids in out.response_ids)
    return elapsed


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=3, help="tiny model size dial")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="best of N runs per cell")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(TinyModelSpec(size=args.size), seed=0).eval()
    engine = HFInferenceEngine(model, tokenizer, max_batch_size=max(args.batch_sizes))
    params = sum(p.numel() for p in model.parameters())
    print(
        f"tiny model size={args.size} ({params / 1e6:.2f} M params), {args.new_tokens} new tokens, {args.threads} thread(s)"
    )
    print(f"{'batch':>6} | {'HF generate tok/s':>18} | {'hf engine tok/s':>16} | {'engine / HF':>11}")
    print("-" * 62)
    _time_engine(engine, _prompts(tokenizer, 2), 4)  # warm-up
    _time_hf_generate(model, tokenizer, _prompts(tokenizer, 2), 4)
    for batch in args.batch_sizes:
        prompts = _prompts(tokenizer, batch)
        hf = min(_time_hf_generate(model, tokenizer, prompts, args.new_tokens) for _ in range(args.repeats))
        ours = min(_time_engine(engine, prompts, args.new_tokens) for _ in range(args.repeats))
        tokens = batch * args.new_tokens
        print(f"{batch:>6} | {tokens / hf:>18,.0f} | {tokens / ours:>16,.0f} | {hf / ours:>10.2f}x")


if __name__ == "__main__":
    main()
