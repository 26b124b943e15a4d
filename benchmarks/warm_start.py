"""Benchmark of the embedded default model: build time and accuracy of the warm start, and how far more SFT goes.

    .venv/bin/python benchmarks/warm_start.py [--threads 1] [--headroom-target 0.8] [--headroom-steps 2500] [--size 2]

1. Builds the default model (`WarmStartSettings()`, with `--size` etc. overriding) into a fresh temporary cache and
   reports build time, parameters, greedy accuracy, and temperature-1 sampling with n=8 (accuracy, well-formed
   rate, prompts with at least one correct sample, prompts with mixed rewards).
2. Headroom: the same settings trained on until held-out greedy accuracy reaches `--headroom-target` (or
   `--headroom-steps`), which shows the task is learnable by the model, i.e. that RL has room to climb.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time

import torch

from skyrl_train.recipes.embedded import get_embedded_model, read_description
from skyrl_train.recipes.warm_start import WarmStartSettings, warm_start


def main() -> int:
    """Run the benchmark and print a report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--headroom-target", type=float, default=0.8, help="greedy accuracy the long run aims for")
    parser.add_argument("--headroom-steps", type=int, default=2500, help="most steps of the long run")
    parser.add_argument("--skip-headroom", action="store_true", help="only build and measure the default model")
    parser.add_argument("--size", type=int, default=None, help="override the size dial")
    parser.add_argument("--seed", type=int, default=None, help="override the seed")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    overrides = {k: v for k, v in {"size": args.size, "seed": args.seed}.items() if v is not None}
    settings = WarmStartSettings(**overrides)

    with tempfile.TemporaryDirectory() as cache:
        os.environ["SKYRL_CACHE"] = cache
        started = time.perf_counter()
        path = get_embedded_model(settings, progress=True)
        wall = time.perf_counter() - started
        description = read_description(path)
    accuracy, sampled, warm = description["accuracy"], description["accuracy"]["sampled"], description["warm_start"]
    print(f"\n## default build ({args.threads} thread(s), torch {torch.__version__})")
    print(f"settings: {settings}")
    print(f"build wall time: {wall:.1f} s (training {warm['train_seconds']} s, {warm['steps']} steps)")
    print(f"parameters: {description['model']['num_parameters']:,}")
    print(f"greedy accuracy ({accuracy['held_out_problems']} held-out): {accuracy['greedy']:.3f}")
    print(
        f"sampled T=1 n={sampled['n']} on {sampled['prompts']} prompts: accuracy {sampled['accuracy']:.3f}, "
        f"well-formed {sampled['well_formed']:.3f}, >=1 correct {sampled['prompts_with_a_correct_sample']:.3f}, "
        f"mixed rewards {sampled['prompts_with_mixed_rewards']:.3f}"
    )
    print("curve (step, loss, greedy accuracy): " + ", ".join(
        f"({h['step']}, {h['loss']:.2f}, {h['greedy_accuracy']:.2f})" for h in warm["history"]
    ))  # fmt: skip
    if args.skip_headroom:
        return 0

    long_run = dataclasses.replace(
        settings, target_low=args.headroom_target, target_high=1.0, max_steps=args.headroom_steps, eval_every=50
    )
    result = warm_start(long_run, progress=True)
    print(f"\n## headroom: SFT until greedy accuracy >= {args.headroom_target}")
    print(
        f"reached: {result.reached_target} | steps {result.steps} | {result.train_seconds:.1f} s | "
        f"greedy accuracy {result.greedy_accuracy:.3f}"
    )
    print("curve: " + ", ".join(f"({h['step']}, {h['greedy_accuracy']:.2f})" for h in result.history))
    return 0


if __name__ == "__main__":
    sys.exit(main())
