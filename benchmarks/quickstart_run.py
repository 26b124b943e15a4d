"""Benchmark: run the quickstart as a user does and record what it measured in benchmarks/results/quickstart.json.

Runs `examples/quickstart/run_quickstart.py` in a child process with its own defaults plus the `jsonl` tracking
backend (so every step's metrics are kept; the console output is unchanged), then records: the machine and date,
the embedded model and its warm start (from the model cache's `skyrl_embedded.json`), the held-out accuracy the
run's last line printed before and after training, the eval curve, how many steps raised a training-health alert,
the wall-clock time of the whole command and the mean step time. docs/quickstart.md renders its measured table from the file (`scripts/render_doc_results.py`).

    python benchmarks/quickstart_run.py [--fresh-clone] [--results benchmarks/results] [--work DIR] [key=value ...]

`--fresh-clone` times what a new user runs: `git clone` of this checkout, then `bash scripts/quickstart.sh` with a
new venv and an empty model cache (install and model build included).

Extra arguments go to the quickstart script (e.g. `trainer.max_training_steps=3 --train-size 256` for a short
check); the results record them, so a shortened run never passes for the page's full one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "quickstart" / "run_quickstart.py"
LAST_LINE = re.compile(r"^quickstart: eval accuracy before=(?P<before>\S+) after=(?P<after>\S+)$")
MODEL_LINE = re.compile(r"^\s*model: (?P<path>.+) \((?P<millions>[\d.]+) M parameters\)$")
ACCURACY = "eval/all/pass_at_1"


def machine() -> str:
    """E.g. `2 CPUs, x86_64, Python 3.11.7, torch 2.13.0+cpu`."""
    import torch

    return f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}"


def run_quickstart(work: Path, arguments: list[str], fresh_clone: Optional[Path] = None) -> tuple[list[str], float]:
    """Run the quickstart script (echoing its output) with `--out work` and the jsonl backend; its lines, seconds.

    With `fresh_clone` (an empty directory), time what a new user runs instead: `git clone` of this checkout's HEAD
    into it, then `bash scripts/quickstart.sh` there with a fresh venv and an empty model cache, so the package
    install and the embedded model's build count too."""
    env = dict(os.environ)
    if fresh_clone is None:
        command = [sys.executable, str(SCRIPT), "--out", str(work), "trainer.logger=['console','jsonl']", *arguments]
        cwd = REPO
    else:
        env.pop("SKYRL_VENV", None)
        env.pop("VIRTUAL_ENV", None)
        env["SKYRL_CACHE"] = str(fresh_clone / "cache")
        command = [
            "bash",
            "scripts/quickstart.sh",
            "--out",
            str(work),
            "trainer.logger=['console','jsonl']",
            *arguments,
        ]
        cwd = fresh_clone / "repo"
    print("quickstart_run: " + " ".join(command), flush=True)
    started = time.perf_counter()
    if fresh_clone is not None:
        subprocess.run(["git", "clone", "-q", str(REPO), str(cwd)], check=True)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=cwd, env=env)
    lines = []
    for line in process.stdout:
        print(line, end="", flush=True)
        lines.append(line.rstrip("\n"))
    if process.wait() != 0:
        raise RuntimeError(f"the quickstart exited with code {process.returncode}: {command}")
    return lines, time.perf_counter() - started


def metric_rows(work: Path) -> list[dict[str, float]]:
    """Every step's metrics of the quickstart run whose `--out` was `work` (its jsonl tracking file)."""
    jsonl = work / "logs" / "jsonl" / "quickstart" / "grpo_addition.jsonl"
    return [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]


def summarize(lines: list[str], metric_rows: list[dict[str, float]], seconds: float) -> dict[str, Any]:
    """The record of one run: printed accuracies, the eval curve and timings, and the model's warm start."""
    last = LAST_LINE.match(lines[-1]) if lines else None
    if last is None:
        raise ValueError(f"the quickstart's last line is not the accuracy line: {lines[-1:]}")
    model_line = next((m for m in map(MODEL_LINE.match, lines) if m), None)
    if model_line is None:
        raise ValueError("the quickstart did not print its `model: <path> (<n> M parameters)` line")
    description = json.loads((Path(model_line.group("path")) / "skyrl_embedded.json").read_text())
    step_seconds = [row["timing/step"] for row in metric_rows if "timing/step" in row]
    return {
        "model": {
            "num_parameters": description["model"]["num_parameters"],
            "warm_start_steps": description["warm_start"]["steps"],
            "warm_start_greedy_accuracy": description["accuracy"]["greedy"],
            "held_out_problems": description["accuracy"]["held_out_problems"],
        },
        "steps": max((int(row["step"]) for row in metric_rows), default=0),
        "accuracy_before": float(last.group("before")),
        "accuracy_after": float(last.group("after")),
        "eval_curve": [[int(row["step"]), row[ACCURACY]] for row in metric_rows if ACCURACY in row],
        "health_alert_steps": sum(1 for row in metric_rows if row.get("health/alerts", 0) > 0),
        "wall_seconds": round(seconds, 1),
        "mean_step_seconds": round(sum(step_seconds) / len(step_seconds), 3) if step_seconds else None,
    }


def main() -> int:
    """Run the quickstart once and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=str(REPO / "benchmarks" / "results"), help="directory for quickstart.json")
    parser.add_argument("--work", default=None, help="the quickstart's --out directory (default: a temporary one)")
    parser.add_argument(
        "--fresh-clone",
        action="store_true",
        help="time `git clone` + `bash scripts/quickstart.sh` with a new venv and an empty model cache",
    )
    args, arguments = parser.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="quickstart_run_") as scratch:
        work = Path(args.work or scratch)
        load_before = os.getloadavg()[0]
        fresh = Path(scratch) / "fresh" if args.fresh_clone else None
        if fresh is not None:
            fresh.mkdir()
        lines, seconds = run_quickstart(work, arguments, fresh)
        rows = metric_rows(work)
        record = {
            "benchmark": "benchmarks/quickstart_run.py",
            "date": datetime.date.today().isoformat(),
            "machine": machine(),
            "arguments": arguments,
            "fresh_clone": bool(args.fresh_clone),
            # the machine may be shared: a load above the core count means the run competed for the CPUs
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            **summarize(lines, rows, seconds),
        }
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "quickstart.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"quickstart_run: wrote {out / 'quickstart.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
