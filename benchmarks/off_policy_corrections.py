"""Benchmark: which off-policy correction the async modes should use by default, measured.

Trains fully_async runs of one `benchmarks/async_vs_sync.py` config (default `plain`, the quickstart task, where
learning shows within 200 steps) with each correction, and a sync run as the on-policy reference, from the same
warm-started model; modes interleaved, `--repeats` runs each. Staleness is raised (`--max-staleness`, default 2)
and the learning rate is the quickstart's 2e-4 so stale data has something to spoil:

- `none`: no correction (`tis_ratio_type=null`);
- `tis`: token TIS, weight `min(rho, 2)` per token;
- `mis`: masked IS on sequences, the geometric-mean ratio kept within [0.99, 1.01] (no TIS);
- `icepop`: IcePop, weight `rho` inside [0.5, 5] and 0 outside, per token (token TIS capped at 5 and the token mask).

It prints and writes (`--out DIR/off_policy_corrections.json`) per correction the training reward after a quarter,
half, three quarters and all of the steps (a trailing mean), the held-out accuracy at the end, and the mean per-step
mismatch KL and clip/mask fractions the runs logged. `scripts/render_doc_results.py` renders the file into
docs/async.md.

    python benchmarks/off_policy_corrections.py [--steps 200] [--repeats 2] [--config plain] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import async_vs_sync as bench  # noqa: E402

import skyrl_gym  # noqa: E402

PREFIX = "trainer.algorithm.off_policy_correction"
CORRECTIONS = {
    "none": [f"{PREFIX}.tis_ratio_type=null"],
    "tis": [f"{PREFIX}.tis_ratio_type=token"],
    "mis": [f"{PREFIX}.tis_ratio_type=null", f"{PREFIX}.sequence_mask_metric=geometric"],
    "icepop": [
        f"{PREFIX}.tis_ratio_type=token",
        f"{PREFIX}.token_tis_ratio_clip_high=5.0",
        f"{PREFIX}.token_mask=true",
    ],
}
LOGGED = {
    "mismatch_kl": "policy/off_policy/mismatch_kl",
    "tis_clip_frac": "policy/off_policy/tis_token_clip_frac",
    "token_mask_frac": "policy/off_policy/token_mask_frac",
    "geo_mask_frac": "policy/off_policy/geo_mask_frac",
}
"""Per-step metrics averaged over a run (those its correction logs)."""


def run_one(model_dir: str, data_dir: Path, config: str, mode: str, steps: int, extra: list[str]) -> dict[str, Any]:
    """One run (`mode`: sync or fully_async with the `extra` overrides): reward curve, held-out accuracy, and the
    mean of each logged off-policy metric."""
    with tempfile.TemporaryDirectory() as out:
        cfg = bench.SkyRLConfig.from_cli_overrides(
            bench.overrides(model_dir, data_dir, Path(out), bench.CONFIGS[config], steps) + bench.MODES[mode] + extra
        )
        result = bench.TimedExp(cfg).run()
    rewards = [value for _, value in sorted(result.history["reward/mean"])]
    logged = {
        name: statistics.mean(value for _, value in result.history[key])
        for name, key in LOGGED.items()
        if key in result.history
    }
    return {
        "rewards": rewards,
        "accuracy": result.final_eval.get("eval/all/mean_reward", float("nan")),
        "samples_per_s": result.global_step * 128 / bench.TimedExp.loop_seconds,
        **logged,
    }


def summary(runs: list[dict[str, Any]], window: int) -> dict[str, Any]:
    """Mean and standard error over repeats of the quarter marks, held-out accuracy and logged metrics."""

    def stats(values: list[float]) -> list[float]:
        error = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
        return [statistics.mean(values), error]

    marks = [
        [
            bench.moving_average(run["rewards"], window)[max(0, round(len(run["rewards"]) * q) - 1)]
            for q in (0.25, 0.5, 0.75, 1.0)
        ]
        for run in runs
    ]
    out = {
        "quarters": [stats([m[q] for m in marks]) for q in range(4)],
        "accuracy": stats([r["accuracy"] for r in runs]),
    }
    for name in LOGGED:
        if all(name in run for run in runs):
            out[name] = statistics.mean(run[name] for run in runs)
    return out


def main() -> None:
    """Run every correction and sync, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--config", default="plain", choices=list(bench.CONFIGS))
    parser.add_argument("--max-staleness", type=int, default=2)
    parser.add_argument("--lr", default="2e-4")
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--corrections", nargs="+", default=list(CORRECTIONS), choices=list(CORRECTIONS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    skyrl_gym.register("checked_addition", bench.CheckedAdditionEnv)
    skyrl_gym.register("graded_addition", bench.GradedAdditionEnv)
    shared = [f"trainer.policy.optimizer.lr={args.lr}"]
    asynchronous = [f"trainer.async_rl.max_staleness={args.max_staleness}"]
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in ["sync", *args.corrections]}
    with tempfile.TemporaryDirectory() as data:
        config = bench.CONFIGS[args.config]
        search = bench.start_search_server(Path(data), config.delay_ms or "200-500")
        data_dir = bench.dataset_for(config.env_class, Path(data) / args.config)
        model_dir = str(bench.get_embedded_model(bench.model_for(config)))
        try:
            for repeat in range(args.repeats):
                for name in runs:
                    print(f"== {args.config} / {name} (run {repeat + 1} of {args.repeats})", flush=True)
                    mode, extra = ("sync", shared) if name == "sync" else ("fully_async", [*shared, *asynchronous])
                    runs[name].append(
                        run_one(model_dir, data_dir, args.config, mode, args.steps, extra + CORRECTIONS.get(name, []))
                    )
        finally:
            search.terminate()
    table = {name: summary(group, args.window) for name, group in runs.items()}
    print(f"\n{'run':>7} | reward at 25/50/75/100 % of the steps ({args.window}-step mean) | held-out | mismatch KL")
    for name, row in table.items():
        quarters = " / ".join(f"{mean:.3f}±{error:.3f}" for mean, error in row["quarters"])
        kl = f"{row['mismatch_kl']:.4f}" if "mismatch_kl" in row else "-"
        print(f"{name:>7} | {quarters} | {row['accuracy'][0]:.3f}±{row['accuracy'][1]:.3f} | {kl}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {
            "benchmark": "benchmarks/off_policy_corrections.py",
            "date": datetime.date.today().isoformat(),
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}",
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "config": args.config,
            "steps": args.steps,
            "repeats": args.repeats,
            "max_staleness": args.max_staleness,
            "lr": args.lr,
            "window": args.window,
            "corrections": {name: CORRECTIONS.get(name, []) for name in runs},
            "summary": table,
            "runs": runs,
        }
        (args.out / "off_policy_corrections.json").write_text(json.dumps(record, indent=1) + "\n")
        print(f"results: {args.out / 'off_policy_corrections.json'}")


if __name__ == "__main__":
    main()
