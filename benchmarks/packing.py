"""Benchmark: sequence packing (`trainer.remove_microbatch_padding`) against padded micro-batches.

The policy worker runs in this process (world size 1: FSDP2 on CPU over gloo, one torch thread, float32) on one
GRPO-shaped batch per shape, with each setting in turn, round after round (interleaved, so a change in the machine's
load hits every setting alike). Each round times one `forward_backward` over the batch (the training pass: forward,
loss, backward; gradients are dropped, no optimizer step) and one `forward` (the old/ref log-prob pass). A setting's
time is the median over rounds of the CPU time of this process (one thread, so other processes' load barely moves
it); the table reports ratios to the padded setting, which is what transfers to another machine.

Settings (`trainer.remove_microbatch_padding`, `trainer.share_prompt_forward`):
- `padded`: false / true, the padded path as it ran before packing (prompts shared through a key/value cache when
  rows repeat them);
- `packed`: true / true, the default: rows packed, each distinct prompt packed once;
- `packed, prompts repeated`: true / false, packing alone.

Shapes: `varied` (long-response RL: 4 prompts of 20-40 tokens x 4 samples, responses drawn uniformly from 20-300
tokens), `short` (the quickstart's shape: 8 prompts of 25-40 tokens x 8 samples, responses of 4-12 tokens) and
`equal` (4 x 4, every response 160 tokens: nothing to unpad but the prompts' left padding). Models: the tiny Qwen2 at
`--sizes` (size 3 is the quickstart's scale, ~1.4 M parameters with this vocabulary; size 8, ~25 M, is the scale of a
realistic-shape CPU run). One micro-batch holds the whole batch.

    python benchmarks/packing.py [--rounds 5] [--sizes 3 8] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from skyrl_train.config import SkyRLConfig
from skyrl_train.generators.types import Trajectory
from skyrl_train.models.logprobs import shared_prompts
from skyrl_train.models.packing import pack_rows
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer
from skyrl_train.training_batch import TrainingBatch
from skyrl_train.workers import PolicyWorker
from skyrl_train.workers.distributed import free_port

SETTINGS = {
    "padded": ["trainer.remove_microbatch_padding=false", "trainer.share_prompt_forward=true"],
    "packed": ["trainer.remove_microbatch_padding=true", "trainer.share_prompt_forward=true"],
    "packed, prompts repeated": ["trainer.remove_microbatch_padding=true", "trainer.share_prompt_forward=false"],
}
"""Setting name -> its config overrides; `padded` is the baseline of every ratio."""

SHAPES = {
    "varied": {"prompts": 4, "samples": 4, "prompt_tokens": (20, 40), "response_tokens": (20, 300)},
    "short": {"prompts": 8, "samples": 8, "prompt_tokens": (25, 40), "response_tokens": (4, 12)},
    "equal": {"prompts": 4, "samples": 4, "prompt_tokens": (20, 40), "response_tokens": (160, 160)},
}
"""Shape name -> GRPO batch: prompts x samples, and the token ranges lengths are drawn from uniformly."""


def grpo_batch(shape: dict[str, Any], seed: int = 0) -> TrainingBatch:
    """A batch of `shape`: random token ids, one prompt per group, response lengths drawn per sample."""
    rng = random.Random(seed)
    rows = []
    for group in range(shape["prompts"]):
        prompt = [rng.randrange(5, 100) for _ in range(rng.randint(*shape["prompt_tokens"]))]
        for _ in range(shape["samples"]):
            length = rng.randint(*shape["response_tokens"])
            rows.append(
                Trajectory(
                    uid=str(group),
                    env_class="benchmark",
                    prompt_token_ids=list(prompt),
                    response_ids=[rng.randrange(5, 100) for _ in range(length)],
                    loss_mask=[1] * length,
                    token_rewards=[0.0] * (length - 1) + [float(rng.random() < 0.5)],
                    rollout_logprobs=[-4.0] * length,
                    stop_reason="stop",
                    num_turns=1,
                    weight_version=0,
                )
            )
    return TrainingBatch.from_trajectories(rows, pad_token_id=0)


def token_counts(batch: TrainingBatch) -> dict[str, int]:
    """Tokens (padding included) a forward over the whole batch runs in each setting: padded (every row as wide as
    the longest prompt + response, or, when rows repeat prompts, each distinct prompt once at the longest prompt's
    width and every row's response at the longest response's), packed with each prompt once, packed with prompts
    repeated."""
    args = (batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width)
    groups = shared_prompts(*args)
    rows, response_width = len(batch), batch.response_width
    padded = rows * (batch.prompt_width + response_width)
    if groups is not None:
        padded = len(groups[0]) * batch.prompt_width + rows * response_width
    return {
        "padded": padded,
        "packed": pack_rows(*args, share_prompts=True).num_tokens,
        "packed, prompts repeated": pack_rows(*args, share_prompts=False).num_tokens,
    }


def make_worker(model_dir: str, overrides: list[str], rows: int) -> PolicyWorker:
    """An in-process policy worker (world size 1) on the model in `model_dir`, one micro-batch per batch."""
    config = SkyRLConfig.from_cli_overrides(
        [
            "trainer.device=cpu",
            f"trainer.policy.model.path={model_dir}",
            "trainer.policy.fsdp.mixed_precision.param_dtype=float32",
            "trainer.policy.gradient_checkpointing=false",
            "trainer.algorithm.use_kl_loss=false",
            f"trainer.micro_train_batch_size_per_gpu={rows}",
            f"trainer.micro_forward_batch_size_per_gpu={rows}",
            *overrides,
        ],
        validate=False,
    ).to_dict()
    worker = PolicyWorker("policy", 0, 1, "127.0.0.1", 0, config, num_threads=1)
    worker.init_model()
    return worker


def cpu_seconds(call: Any, *args: Any, **kwargs: Any) -> float:
    """CPU seconds of this process spent in `call(*args, **kwargs)`."""
    start = time.process_time()
    call(*args, **kwargs)
    return time.process_time() - start


def measure(model_dir: str, batch: TrainingBatch, rounds: int) -> dict[str, dict[str, float]]:
    """Median CPU seconds of `forward_backward` and `forward` per setting, interleaved over `rounds` rounds (after
    one warm-up round)."""
    workers = {name: make_worker(model_dir, overrides, len(batch)) for name, overrides in SETTINGS.items()}
    advantages = torch.randn(len(batch), 1, generator=torch.Generator().manual_seed(0)) * batch.response_mask
    times: dict[str, dict[str, list[float]]] = {name: {"forward_backward": [], "forward": []} for name in workers}
    for round_index in range(rounds + 1):
        for name, worker in workers.items():
            train = cpu_seconds(worker.forward_backward, batch, advantages, None, on_policy=True)
            worker.model.zero_grad(set_to_none=True)
            forward = cpu_seconds(worker.forward, batch)
            if round_index:  # round 0 warms the allocator and the kernels up
                times[name]["forward_backward"].append(train)
                times[name]["forward"].append(forward)
    return {name: {kind: statistics.median(values) for kind, values in kinds.items()} for name, kinds in times.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every (model size, shape) pair and write `<out>/packing.json`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 8])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    runs = []
    try:
        for size in args.sizes:
            spec = TinyModelSpec(size=size, max_position_embeddings=1024)
            with tempfile.TemporaryDirectory() as model_dir:
                model = build_tiny_model(spec, seed=0)
                parameters = sum(p.numel() for p in model.parameters())
                model.save_pretrained(model_dir)
                save_tokenizer(build_char_tokenizer(), model_dir)
                for shape_name in args.shapes:
                    batch = grpo_batch(SHAPES[shape_name])
                    seconds = measure(model_dir, batch, args.rounds)
                    base = seconds["padded"]
                    runs.append(
                        {
                            "model_size": size,
                            "parameters": parameters,
                            "shape": shape_name,
                            "rows": len(batch),
                            "tokens": token_counts(batch),
                            "seconds": seconds,
                            "speedup": {
                                name: {kind: base[kind] / value for kind, value in kinds.items()}
                                for name, kinds in seconds.items()
                            },
                        }
                    )
                    print(json.dumps(runs[-1]), flush=True)
    finally:
        dist.destroy_process_group()
    result = {
        "benchmark": "benchmarks/packing.py",
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, torch {torch.__version__}, 1 torch thread",
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "rounds": args.rounds,
        "shapes": {name: SHAPES[name] for name in args.shapes},
        "settings": SETTINGS,
        "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "packing.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
