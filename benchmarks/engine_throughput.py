"""Benchmark: the embedded `hf` engine against plain `model.generate` on the tiny model, tokens/s per batch size.

Two workloads, both sampling at temperature 1 from the same chat prompts with one torch thread in one process:
- `fixed`: every row decodes exactly `--new-tokens` tokens (eos ignored): the same compute for both, so the ratio
  shows pure per-step overhead;
- `variable`: rows stop at any of `--stop-tokens` token ids (about 1 in 40 per step here), as RL rollouts end at eos
  at different lengths; `model.generate` keeps decoding finished rows until the longest ends, the engine drops them.
Tokens/s counts the tokens each row really produced; the last column is the engine's speed-up as a ratio.

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


def _time_hf_generate(
    model, tokenizer, prompts: list[list[int]], new_tokens: int, stop_ids: list[int]
) -> tuple[float, int]:
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
            min_new_tokens=0 if stop_ids else new_tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            eos_token_id=stop_ids or None,
            pad_token_id=tokenizer.pad_token_id,
        )
    elapsed = time.perf_counter() - start
    produced = 0
    for row in out[:, width:].tolist():  # tokens up to and including the first stop token
        stops = [i for i, token in enumerate(row) if token in stop_ids]
        produced += stops[0] + 1 if stops else len(row)
    return elapsed, produced


def _time_engine(engine, prompts: list[list[int]], new_tokens: int, stop_ids: list[int]) -> tuple[float, int]:
    params = SamplingParams(max_tokens=new_tokens, temperature=1.0, ignore_eos=True, stop_token_ids=tuple(stop_ids))
    start = time.perf_counter()
    out = asyncio.run(engine.generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params)))
    elapsed = time.perf_counter() - start
    return elapsed, sum(len(ids) for ids in out.response_ids)


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=3, help="tiny model size dial")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="best of N runs per cell")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--stop-tokens", type=int, default=3, help="stop token ids in the variable workload")
    parser.add_argument("--workloads", nargs="+", default=["fixed", "variable"], choices=["fixed", "variable"])
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
    stop_ids = list(range(60, 60 + args.stop_tokens))  # ordinary characters: the untrained model emits them
    _time_engine(engine, _prompts(tokenizer, 2), 4, [])  # warm-up
    _time_hf_generate(model, tokenizer, _prompts(tokenizer, 2), 4, [])
    print(f"{'workload':>8} | {'batch':>5} | {'HF generate tok/s':>17} | {'hf engine tok/s':>15} | {'engine / HF':>11}")
    print("-" * 72)
    for workload in args.workloads:
        stops = stop_ids if workload == "variable" else []
        for batch in args.batch_sizes:
            prompts = _prompts(tokenizer, batch)
            hf = [_time_hf_generate(model, tokenizer, prompts, args.new_tokens, stops) for _ in range(args.repeats)]
            ours = [_time_engine(engine, prompts, args.new_tokens, stops) for _ in range(args.repeats)]
            hf_rate = max(tokens / seconds for seconds, tokens in hf)
            our_rate = max(tokens / seconds for seconds, tokens in ours)
            print(f"{workload:>8} | {batch:>5} | {hf_rate:>17,.0f} | {our_rate:>15,.0f} | {our_rate / hf_rate:>10.2f}x")


if __name__ == "__main__":
    main()
