"""Benchmark: bfloat16 against float32 on this CPU, the evidence behind `auto`'s compute dtype.

`config.auto_settings` computes in bfloat16 on a CPU with native bfloat16 dot products (`avx512_bf16`, `amx_bf16`,
Arm's `bf16`) for models of at least `BF16_CPU_MIN_PARAMETERS` parameters. This script times, per tiny-model size
(freshly initialised: the timing does not depend on what the weights learned), one torch thread:

- `decode`: an `HFInferenceEngine` sampling 8 rows (one engine's share of the long shape's 16) of `--new-tokens`
  tokens each (seeded, temperature 1, `ignore_eos`), the model in float32, in bfloat16 as the engine runs it
  (attention in float32, `models.cpu_attention`), and in bfloat16 with transformers' own `sdpa` (attention in
  bfloat16: why the engine upcasts it);
- `train`: one packed forward and backward (`models.packing`, prompts shared) over 8 rows of a 30-token prompt and
  responses of 95-316 tokens (the long shape's spread), float32 against bfloat16 parameters.

Settings run in alternating rounds after a warm-up round of each; the table gives each one's median seconds and its
speed-up over float32, and what `auto` picks for that model on this machine.

    python benchmarks/cpu_bf16.py [--sizes 3 5 7] [--rounds 3] [--new-tokens 200] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from skyrl_train.config.auto_settings import BF16_CPU_MIN_PARAMETERS, Machine, choose_compute_dtype, model_facts
from skyrl_train.inference import HFInferenceEngine, InferenceEngineInput, SamplingParams
from skyrl_train.models.packing import enable_packed_attention, pack_rows, packed_response_logprobs
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer

MODELS = {2: 3, 3: 3, 5: 4, 7: 4, 8: 4}
"""Tiny-model size -> MLP ratio (size 7 with ratio 4 is the long shape's 21 M model)."""
ROWS = 8
PROMPT_TOKENS = 30
RESPONSE_TOKENS = (95, 120, 160, 200, 240, 280, 300, 316)
"""The training rows' response lengths: the long shape's range (95-316 tokens)."""


def decode_seconds(model: Any, tokenizer: Any, new_tokens: int, attention: str | None = None) -> float:
    """Seconds for a fresh engine on `model` to sample `ROWS` rows of `new_tokens` tokens (`attention` set after the
    engine picked its own, to time another one)."""
    engine = HFInferenceEngine(model, tokenizer, max_batch_size=ROWS)
    if attention is not None:
        model.set_attn_implementation(attention)
    params = SamplingParams(max_tokens=new_tokens, temperature=1.0, seed=7, ignore_eos=True)
    prompts = [list(range(5, 5 + PROMPT_TOKENS - row)) for row in range(ROWS)]
    started = time.perf_counter()
    asyncio.run(engine.generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params)))
    return time.perf_counter() - started


def training_batch() -> Any:
    """The packed training micro-batch: `ROWS` rows of `PROMPT_TOKENS` prompt tokens and `RESPONSE_TOKENS`."""
    generator = torch.Generator().manual_seed(0)
    width = PROMPT_TOKENS + max(RESPONSE_TOKENS)
    input_ids = torch.randint(5, 100, (ROWS, width), generator=generator)
    input_ids[:, :PROMPT_TOKENS] = input_ids[0, :PROMPT_TOKENS]  # one prompt, as a group's samples share
    mask = torch.zeros((ROWS, width), dtype=torch.long)
    for row, length in enumerate(RESPONSE_TOKENS):
        mask[row, : PROMPT_TOKENS + length] = 1
    input_ids[mask == 0] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return pack_rows(input_ids, mask, positions, PROMPT_TOKENS, share_prompts=True)


def train_seconds(model: Any, packed: Any) -> float:
    """Seconds of one packed forward and backward of `model`."""
    started = time.perf_counter()
    logprobs, _ = packed_response_logprobs(model, packed)
    logprobs.sum().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def alternate(settings: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each setting once as a warm-up, then `rounds` rounds in alternating order: every setting's seconds."""
    for run in settings.values():
        run()
    seconds: dict[str, list[float]] = {name: [] for name in settings}
    names = list(settings)
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            seconds[name].append(settings[name]())
    return seconds


def measure(size: int, rounds: int, new_tokens: int, tokenizer: Any, machine: Machine) -> dict:
    """Both parts for the tiny model `size`: its rows of the table, printed and returned."""
    full = build_tiny_model(TinyModelSpec(size=size, mlp_ratio=MODELS[size]), seed=0).eval()
    half = copy.deepcopy(full).to(torch.bfloat16)
    parameters = sum(p.numel() for p in full.parameters())
    decode = alternate(
        {
            "float32": lambda: decode_seconds(full, tokenizer, new_tokens),
            "bfloat16": lambda: decode_seconds(half, tokenizer, new_tokens),
            "bfloat16, attention in bfloat16": lambda: decode_seconds(half, tokenizer, new_tokens, "sdpa"),
        },
        rounds,
    )
    full_train, half_train = copy.deepcopy(full).train(), copy.deepcopy(half).train()
    for model in (full_train, half_train):
        enable_packed_attention(model)
    packed = training_batch()
    train = alternate(
        {"float32": lambda: train_seconds(full_train, packed), "bfloat16": lambda: train_seconds(half_train, packed)},
        rounds,
    )
    auto = choose_compute_dtype(machine, model_facts(full))[0]
    parts = []
    print(f"\nsize {size} ({parameters / 1e6:.1f} M parameters): auto picks {auto} on this CPU")
    for part, seconds in (("decode", decode), ("train", train)):
        base = statistics.median(seconds["float32"])
        for setting, values in seconds.items():
            median = statistics.median(values)
            print(f"  {part:>6} {setting:>32}: {median:7.3f} s  {base / median:5.2f}x")
            parts.append({"part": part, "setting": setting, "seconds": values, "median_s": median})
    return {"size": size, "mlp_ratio": MODELS[size], "parameters": parameters, "auto": auto, "parts": parts}


def main() -> None:
    """Run every size and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", choices=sorted(MODELS), default=[3, 5, 7])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=200, help="tokens each decoded row samples")
    parser.add_argument("--out", type=Path, default=None, help="write cpu_bf16.json here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    machine = Machine.detect("cpu")
    flag = machine.cpu_bf16
    print(f"native bfloat16 on this CPU: {flag or 'none'}; auto's threshold {BF16_CPU_MIN_PARAMETERS / 1e6:g} M")
    load_before = os.getloadavg()[0]
    tokenizer = build_char_tokenizer()
    runs = [measure(size, args.rounds, args.new_tokens, tokenizer, machine) for size in args.sizes]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {
            "benchmark": "benchmarks/cpu_bf16.py",
            "date": datetime.date.today().isoformat(),
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, torch {torch.__version__}, 1 torch thread",
            "cpu_bf16": flag,
            "threshold_parameters": BF16_CPU_MIN_PARAMETERS,
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "rounds": args.rounds,
            "rows": ROWS,
            "new_tokens": args.new_tokens,
            "runs": runs,
        }
        (args.out / "cpu_bf16.json").write_text(json.dumps(record, indent=1))
        print(f"results: {args.out / 'cpu_bf16.json'}")


if __name__ == "__main__":
    main()
