"""Benchmark: is a refactor's step as fast as before? Two checkouts' own benchmarks, interleaved on one machine.

A redesign that keeps behaviour must also keep speed. This runs, in each of two checkouts (each with its own
`.venv`), that checkout's `benchmarks/step_breakdown.py` (the quickstart's step, phase by phase, and the share
outside model compute) and `benchmarks/async_vs_sync.py` on one config (`--async-config`, default plain: the
quickstart task; samples/s of sync and each async mode's ratio to it), alternating the order every round so that a
drift of the machine hits both alike. Only ratios taken in this one run are compared: machines of one kind differ by
up to 2x in speed.

    python benchmarks/redesign_speed.py --before /work/wt/pre46 --after /work/wt/r46 --labels 7b0d386 0c8995b \\
        [--rounds 3] [--steps 30] [--async-config plain] [--async-steps 16] [--delay-ms 20-50] \\
        [--results benchmarks/results/redesign_speed.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ASYNC_MODES = ("sync", "one_step_off", "fully_async")
STEP_PARTS = ("step", "model compute, total", "outside model compute")


def run_in(checkout: Path, script: str, args: list[str]) -> None:
    """Run `checkout`'s own `benchmarks/<script>` with its own venv (its packages, not ours), failing loudly."""
    python = checkout / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{checkout} has no .venv (run `bash scripts/setup.sh` there)")
    command = [str(python), str(checkout / "benchmarks" / script), *args]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, cwd=checkout, check=True, env={**os.environ, "PYTHONPATH": ""})


def step_breakdown(checkout: Path, steps: int, scratch: Path) -> dict[str, float]:
    """Mean seconds of the step, its model compute and the rest, from one step_breakdown.py run of `checkout`."""
    results = scratch / "step_breakdown.json"
    run_in(checkout, "step_breakdown.py", ["--steps", str(steps), "--results", str(results)])
    rows = {row["part"]: row["seconds"] for row in json.loads(results.read_text())["rows"]}
    return {part: rows[part] for part in STEP_PARTS}


def async_ratios(checkout: Path, config: str, steps: int, delay_ms: str, scratch: Path) -> dict[str, float]:
    """samples/s of each async mode over sync on `config`, from one async_vs_sync.py run of `checkout`."""
    run_in(
        checkout,
        "async_vs_sync.py",
        [
            "--configs",
            config,
            "--modes",
            *ASYNC_MODES,
            "--steps",
            str(steps),
            "--delay-ms",
            delay_ms,
            "--out",
            str(scratch),
        ],
    )
    runs = json.loads((scratch / "async_vs_sync.json").read_text())["runs"]
    speed = {run["mode"]: run["samples_per_s"] for run in runs}
    return {"sync_samples_per_s": speed["sync"], **{mode: speed[mode] / speed["sync"] for mode in ASYNC_MODES[1:]}}


def summarize(rounds: list[dict[str, Any]], labels: tuple[str, str]) -> list[dict[str, Any]]:
    """Per measured figure: each checkout's median over the rounds and after / before."""
    figures = [f"step_breakdown:{part}" for part in STEP_PARTS] + [
        f"async_vs_sync:{key}" for key in ("sync_samples_per_s", *ASYNC_MODES[1:])
    ]
    table = []
    for figure in figures:
        bench, key = figure.split(":")
        medians = [statistics.median(r[label][bench][key] for r in rounds) for label in labels]
        table.append(
            {
                "figure": figure,
                labels[0]: medians[0],
                labels[1]: medians[1],
                "after_over_before": medians[1] / medians[0],
            }
        )
    return table


def main() -> int:
    """Run both checkouts' benchmarks round by round and print (and optionally write) the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="checkout before the change (with .venv)")
    parser.add_argument("--after", type=Path, required=True, help="checkout after the change (with .venv)")
    parser.add_argument("--labels", nargs=2, required=True, help="names of the two checkouts, e.g. their commits")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each benchmark per checkout")
    parser.add_argument("--steps", type=int, default=30, help="step_breakdown.py steps per run")
    parser.add_argument("--async-steps", type=int, default=16, help="async_vs_sync.py steps per mode and run")
    parser.add_argument(
        "--async-config",
        default="plain",
        help="async_vs_sync.py config (plain: the quickstart task, nothing to wait on)",
    )
    parser.add_argument(
        "--delay-ms", default="20-50", help="the API wait of the waiting configs (async_vs_sync.py --delay-ms)"
    )
    parser.add_argument("--results", type=Path, help="write the rounds and the table to this JSON file")
    args = parser.parse_args()
    labels = tuple(args.labels)
    checkouts = dict(zip(labels, (args.before.resolve(), args.after.resolve())))
    load_before = os.getloadavg()[0]
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        order = labels if number % 2 == 0 else labels[::-1]
        measured: dict[str, Any] = {label: {} for label in labels}
        for label in order:
            with tempfile.TemporaryDirectory(prefix=f"redesign_speed_{label}_") as scratch:
                measured[label]["step_breakdown"] = step_breakdown(checkouts[label], args.steps, Path(scratch))
                measured[label]["async_vs_sync"] = async_ratios(
                    checkouts[label], args.async_config, args.async_steps, args.delay_ms, Path(scratch)
                )
        rounds.append(measured)
        print(json.dumps(measured, indent=1), flush=True)
    table = summarize(rounds, labels)
    print(f"\n{'figure':42s} {labels[0]:>12s} {labels[1]:>12s} {'after/before':>13s}")
    for row in table:
        print(f"{row['figure']:42s} {row[labels[0]]:12.4f} {row[labels[1]]:12.4f} {row['after_over_before']:13.3f}")
    if args.results is not None:
        data = {
            "benchmark": "redesign_speed",
            "labels": list(labels),
            "rounds": rounds,
            "table": table,
            "steps": args.steps,
            "async_steps": args.async_steps,
            "async_config": args.async_config,
            "delay_ms": args.delay_ms,
            "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
            "date": datetime.date.today().isoformat(),
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, {platform.python_version()}",
        }
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(data, indent=1) + "\n")
        print(f"results written to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
