"""Benchmark: does the quickstart step stay within 2x of its idle speed when another process keeps one core busy?

Runs the quickstart configuration (`examples/quickstart/run_quickstart.py`: Ray, 2 FSDP2 policy ranks, 2 colocated
`hf` engines, shm weight sync, 32 prompts x 8 samples) for `--steps` steps without evaluation or checkpoints, once per
(thread setting, load) pair, back to back:

- thread settings: the defaults (`trainer.placement.num_threads_per_worker` and
  `generator.inference_engine.num_threads` null: each actor takes its bundle's CPUs, 1 here) and `--threads` torch
  threads per actor (more threads than cores: the case a user who sets the keys by hand may hit);
- load: `idle`, then `busy` with one extra process spinning on a core (a browser tab, a compile, another job).

Each row is the mean `timing/step` after `--warmup-steps`; the ratio column is busy / idle of the same setting (the
goal: at most 2 with the defaults). Results go to `--out/thread_counts.json`.

    python benchmarks/thread_counts.py [--steps 12] [--warmup-steps 3] [--threads 2] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.recipes.embedded import get_embedded_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_breakdown import load_quickstart  # noqa: E402

SPIN = "while True:\n    pass\n"


@contextmanager
def busy_core(enabled: bool) -> Iterator[None]:
    """While inside, one extra process spins on a core (nothing when `enabled` is false)."""
    if not enabled:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def mean_step_seconds(overrides: list[str], warmup_steps: int) -> float:
    """Train with `overrides` and return the mean `timing/step` after the first `warmup_steps` steps."""
    result = BasePPOExp(SkyRLConfig.from_cli_overrides(overrides)).run()
    steps = [seconds for step, seconds in result.history["timing/step"] if step > warmup_steps]
    return statistics.mean(steps)


def main() -> int:
    """Run every (thread setting, load) pair and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads per actor of the explicit setting")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    if args.steps <= args.warmup_steps:
        parser.error(f"--steps ({args.steps}) must exceed --warmup-steps ({args.warmup_steps})")
    logging.basicConfig(level=logging.WARNING)
    quickstart = load_quickstart()
    model_dir = get_embedded_model(quickstart.MODEL)
    settings = {
        "defaults": [],
        f"{args.threads} threads per actor": [
            f"trainer.placement.num_threads_per_worker={args.threads}",
            f"generator.inference_engine.num_threads={args.threads}",
        ],
    }
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()[0]  # what else runs on the machine: "idle" means no extra load of ours
    with tempfile.TemporaryDirectory(prefix="thread_counts_") as scratch:
        out = Path(scratch)
        write_dataset(out / "data", quickstart.MODEL.task, train_size=2000, test_size=16, difficulty=2, seed=0)
        base = quickstart.quickstart_overrides(str(model_dir), out / "data", out) + [
            f"trainer.max_training_steps={args.steps}",
            "trainer.eval_before_train=false",
            "trainer.eval_interval=0",
            "trainer.ckpt_interval=0",
            "trainer.hf_save_interval=-1",
        ]
        for name, extra in settings.items():
            seconds = {}
            for load in ("idle", "busy"):
                print(f"thread_counts: {name}, {load} ...", flush=True)
                with busy_core(load == "busy"):
                    seconds[load] = mean_step_seconds(base + extra, args.warmup_steps)
            rows.append(
                {"setting": name, "overrides": extra, **seconds, "busy_over_idle": seconds["busy"] / seconds["idle"]}
            )
    print(
        f"\nquickstart s/step, idle vs one core kept busy ({os.cpu_count()} CPUs, steps {args.warmup_steps + 1}-{args.steps})"
    )
    print(f"{'setting':24s} {'idle':>8s} {'busy':>8s} {'busy/idle':>10s}")
    for row in rows:
        print(f"{row['setting']:24s} {row['idle']:8.3f} {row['busy']:8.3f} {row['busy_over_idle']:10.2f}")
    record = {
        "benchmark": "thread_counts",
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, {platform.python_version()}",
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "rows": rows,
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "thread_counts.json"
    path.write_text(json.dumps(record, indent=1))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
