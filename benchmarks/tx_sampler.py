"""skyrl-tx sampling: the `hf` sampler (peft adapter on the training model) against `--sampler vllm` (the same saved
adapter served by vLLM by name), side by side in one process on one model. Needs vLLM: run it with
`.venv-vllm/bin/python` after `bash scripts/setup_vllm.sh`.

    .venv-vllm/bin/python benchmarks/tx_sampler.py                       # the embedded model, 3 rounds
    .venv-vllm/bin/python benchmarks/tx_sampler.py --prompts 64 --samples 8 --max-tokens 32

A LoRA adapter (rank 32, attention + MLP + unembedding: Tinker's default) is trained a few steps and saved as sampler
weights; then each round samples the same jobs (`--prompts` prompts x `--samples`, seeded, temperature 1,
`--max-tokens` new tokens, no stop) through both samplers, alternating which goes first. Prints tokens/s per sampler
per round for the adapter and for the base model, the median ratios, and the largest gap between the two samplers' logprobs of the greedy tokens.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="an HF model folder (default: the embedded model)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rank", type=int, default=32)
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> None:
    """Run the comparison and print the table."""
    args = parse_args(argv)
    import torch

    from skyrl_tx.cli import DEFAULT_BASE_MODEL, parse_base_models
    from skyrl_tx.compute import LoraHost, LoraSpec, SampleJob
    from skyrl_tx.vllm_sampler import VLLMSampler
    from skyrl_tx.wire import TrainDatum

    model = args.model or parse_base_models(None)[DEFAULT_BASE_MODEL]
    torch.manual_seed(0)
    host = LoraHost("bench/model", model)
    host.add_adapter("bench", LoraSpec(rank=args.rank, seed=0))
    tokens = list(range(5, 30))
    datum = TrainDatum(tokens=tokens, inputs={"target_tokens": np.array(tokens[1:] + [5]), "weights": np.ones(25)})
    adam = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 1}
    for _ in range(3):
        host.forward_backward("bench", [datum], "cross_entropy", {}, forward_only=False)
        host.optim_step("bench", adam)
    folder = Path(tempfile.mkdtemp(prefix="tx-sampler-bench-")) / "sampler"
    host.save("bench", folder, with_optimizer=False)
    started = time.perf_counter()
    vllm = VLLMSampler(model, host.max_context, max_lora_rank=args.rank)
    print(f"vLLM engine up in {time.perf_counter() - started:.1f} s")

    rng = np.random.default_rng(0)
    jobs = [
        SampleJob(
            prompt=[int(t) for t in rng.integers(5, 40, size=8)],
            num_samples=args.samples,
            max_tokens=args.max_tokens,
            temperature=1.0,
            top_k=-1,
            top_p=1.0,
            seed=index,
            stop=[],  # no EOS either: every sample is max_tokens long, so both samplers do the same work
        )
        for index in range(args.prompts)
    ]
    samplers = {"hf": host, "vllm": vllm}
    for sampler in samplers.values():  # warm-up (vLLM loads the adapter on first use)
        sampler.sample(folder, jobs[:2])
    print(f"{args.prompts} prompts x {args.samples} samples x {args.max_tokens} tokens, adapter rank {args.rank}")
    print(f"{'weights':>8} {'round':>5} {'hf tok/s':>10} {'vllm tok/s':>11} {'vllm/hf':>8}")
    for label, directory in (("adapter", folder), ("base", None)):
        rates: dict[str, list[float]] = {"hf": [], "vllm": []}
        for round_index in range(args.rounds):
            order = ["hf", "vllm"] if round_index % 2 == 0 else ["vllm", "hf"]
            for name in order:
                started = time.perf_counter()
                results = samplers[name].sample(directory, jobs)
                seconds = time.perf_counter() - started
                generated = sum(len(row.tokens) for result in results for row in result.sequences)
                rates[name].append(generated / seconds)
            hf_rate, vllm_rate = rates["hf"][-1], rates["vllm"][-1]
            print(f"{label:>8} {round_index + 1:>5} {hf_rate:>10.0f} {vllm_rate:>11.0f} {vllm_rate / hf_rate:>8.2f}")
        ratio = statistics.median(v / h for v, h in zip(rates["vllm"], rates["hf"]))
        print(f"{label:>8} median vllm/hf: {ratio:.2f}x")

    greedy = [
        SampleJob(prompt=job.prompt, num_samples=1, max_tokens=args.max_tokens, temperature=0.0, top_k=-1, top_p=1.0,
                  seed=None, stop=[])
        for job in jobs
    ]  # fmt: skip
    reference, served = host.sample(folder, greedy), vllm.sample(folder, greedy)
    same = sum(a.sequences[0].tokens == b.sequences[0].tokens for a, b in zip(reference, served))
    gap = max(
        float(np.max(np.abs(np.subtract(a.sequences[0].logprobs, b.sequences[0].logprobs))))
        for a, b in zip(reference, served)
        if a.sequences[0].tokens == b.sequences[0].tokens
    )
    print(f"greedy: {same}/{len(greedy)} identical sequences; largest logprob gap {gap:.2e}")
    vllm.close()


if __name__ == "__main__":
    main()
