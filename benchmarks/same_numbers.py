"""Benchmark: do two checkouts train the seeded quickstart to the same numbers? (a refactor's "behaviour unchanged")

Give it two folders that `benchmarks/quickstart_run.py --results R --work W` filled, one per checkout (run on one
machine: float results differ between machines). It compares the held-out eval curve of each `R/quickstart.json` and
every step's metrics in the `W/logs` jsonl files, and writes how many steps' metrics match exactly, the first step
that differs (if any) and both eval curves.

    python benchmarks/quickstart_run.py --results /tmp/a --work /tmp/a/work        # in the checkout before
    python benchmarks/quickstart_run.py --results /tmp/b --work /tmp/b/work        # in the checkout after
    python benchmarks/same_numbers.py /tmp/a /tmp/b --labels 7b0d386 0c8995b [--results benchmarks/results/x.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

COMPARED = ("reward/mean", "policy/loss", "policy/grad_norm")
"""The per-step metrics compared: the reward curve and what the update did with it."""


def step_metrics(work: Path) -> dict[int, dict[str, float]]:
    """Per step, the compared metrics logged in the jsonl files under `work/logs`."""
    steps: dict[int, dict[str, float]] = {}
    for path in sorted(work.glob("logs/**/*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            values = {key: record[key] for key in COMPARED if key in record}
            if values and "step" in record:
                steps.setdefault(int(record["step"]), {}).update(values)
    return steps


def compare(before: Path, after: Path, work_name: str = "work") -> dict[str, Any]:
    """The comparison of two filled folders (each with `quickstart.json` and `<work_name>/logs`)."""
    runs = [json.loads((folder / "quickstart.json").read_text()) for folder in (before, after)]
    metrics = [step_metrics(folder / work_name) for folder in (before, after)]
    if not metrics[0] or not metrics[1]:
        raise SystemExit(f"no per-step metrics under {before / work_name}/logs or {after / work_name}/logs")
    steps = sorted(set(metrics[0]) | set(metrics[1]))
    differing = [step for step in steps if metrics[0].get(step) != metrics[1].get(step)]
    return {
        "steps": len(steps),
        "steps_identical": len(steps) - len(differing),
        "first_differing_step": differing[0] if differing else None,
        "compared_metrics": list(COMPARED),
        "eval_curves_identical": runs[0]["eval_curve"] == runs[1]["eval_curve"],
        "eval_curves": [runs[0]["eval_curve"], runs[1]["eval_curve"]],
        "accuracy_after": [runs[0]["accuracy_after"], runs[1]["accuracy_after"]],
        "machine": [runs[0].get("machine"), runs[1].get("machine")],
    }


def main(argv: list[str] | None = None) -> int:
    """Compare, print the verdict, write the results file when asked; exit 1 when the numbers differ."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--labels", nargs=2, default=["before", "after"], help="what each folder ran (commits)")
    parser.add_argument("--work-name", default="work", help="the --work folder's name inside each folder")
    parser.add_argument("--results", type=Path, default=None, help="write the comparison here (JSON)")
    args = parser.parse_args(argv)
    result = {"benchmark": "same_numbers", "date": datetime.date.today().isoformat(), "labels": args.labels}
    result.update(compare(args.before, args.after, args.work_name))
    same = result["eval_curves_identical"] and result["first_differing_step"] is None
    print(
        f"{args.labels[0]} vs {args.labels[1]}: {result['steps_identical']}/{result['steps']} steps with identical "
        f"{', '.join(COMPARED)}; eval curves identical: {result['eval_curves_identical']}; held-out accuracy after "
        f"{result['accuracy_after'][0]} vs {result['accuracy_after'][1]}"
    )
    if args.results:
        args.results.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
