"""Benchmark: does dynamic sampling (`filter` or `replace`) reach GRPO's held-out accuracy with fewer sampled groups?

Runs the quickstart configuration (`examples/quickstart/run_quickstart.py`: the embedded tiny model on 2-digit
addition through Ray, FSDP2, colocated hf engines and weight sync) twice, back to back on this machine:

- `grpo`: plain GRPO for `--steps` steps (every step samples `train_batch_size` prompt groups);
- `filter`: the same with `trainer.algorithm.dynamic_sampling.type=filter`, which drops groups whose samples all got
  the same reward and samples more batches until `train_batch_size` informative groups are kept. It runs until it
  has sampled as many prompt groups as `grpo` did (so both spend the same generation budget).
  `--filter-override trainer.algorithm.dynamic_sampling.type=replace` measures POLARIS replacement instead (copies of
  informative groups take the uninformative groups' places); the run is then named `replace`.

Both use a constant learning rate after warm-up (the `filter` run stops early, so a decaying schedule would treat the
two differently) and evaluate greedy accuracy on the same held-out problems every `--eval-every` steps. The table lists accuracy
against sampled prompt groups (the generation cost), and the groups each run needed to first reach `grpo`'s final
accuracy. Results go to `--out` as JSON (read by docs/algorithms.md's table) and a PNG plot.

    python benchmarks/dynamic_sampling.py [--steps 450] [--eval-every 25] [--out benchmarks/results]
        [--filter-override key=value ...] [--model-setting key=value ...] [key=value ...]

`--model-setting` changes a field of the quickstart's `WarmStartSettings` for both runs, e.g.
`--model-setting target_low=0.1` starts from a weaker warm start (stopped at 10 % greedy accuracy instead of 20 %),
where most groups of 8 samples are all wrong: the regime dynamic sampling is meant for.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import logging
import os
import platform
import sys
import tempfile
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Optional

from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.recipes.embedded import get_embedded_model
from skyrl_train.recipes.warm_start import WarmStartSettings
from skyrl_train.trainer import RayPPOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_breakdown import load_quickstart  # noqa: E402

ACCURACY = "eval/all/pass_at_1"


def accuracy_curve(history: dict[str, list[tuple[int, float]]]) -> list[tuple[float, float]]:
    """(sampled prompt groups so far, held-out accuracy) at every evaluation, starting with the one at step 0."""
    groups = dict(history.get("trainer/sampled_groups_total", []))
    curve = []
    for step, accuracy in history.get(ACCURACY, []):
        curve.append((groups.get(step, 0.0) if step else 0.0, accuracy))
    return curve


def groups_to_reach(curve: list[tuple[float, float]], target: float) -> Optional[float]:
    """Sampled groups at the first evaluation whose accuracy reaches `target` (None if never)."""
    return next((groups for groups, accuracy in curve if accuracy >= target), None)


class BudgetTrainer(RayPPOTrainer):
    """Stops starting new steps once `budget` prompt groups were sampled (a step in progress still finishes, its
    dynamic-sampling rounds included)."""

    def __init__(self, *args: Any, budget: Optional[float], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.budget = budget

    async def step(self) -> Optional[dict[str, float]]:
        """A training step, or None once the budget is spent."""
        if self.budget is not None and self.sampled_groups_total >= self.budget:
            return None
        return await super().step()


class BudgetExp(BasePPOExp):
    """The quickstart experiment with `BudgetTrainer`."""

    def __init__(self, cfg: SkyRLConfig, budget: Optional[float]) -> None:
        super().__init__(cfg)
        self.budget = budget

    def get_trainer(self, **parts: Any) -> RayPPOTrainer:
        """The budgeted trainer."""
        return BudgetTrainer(self.cfg, budget=self.budget, **parts)


def run(name: str, overrides: list[str], budget: Optional[float] = None) -> dict[str, Any]:
    """Train one configuration (until `budget` prompt groups were sampled, if given); return its curve and totals."""
    print(f"dynamic_sampling: running {name} ...", flush=True)
    cfg = SkyRLConfig.from_cli_overrides(overrides)
    result = BudgetExp(cfg, budget).run()
    curve = accuracy_curve(result.history)
    return {
        "name": name,
        "steps": result.global_step,
        "sampled_groups": max((g for g, _ in curve), default=0.0),
        "curve": curve,
        "final_accuracy": curve[-1][1] if curve else float("nan"),
    }


def model_settings(base: WarmStartSettings, settings: list[str]) -> WarmStartSettings:
    """`base` with each `key=value` of `settings` applied (the value converted to the field's type)."""
    known = {f.name: type(getattr(base, f.name)) for f in fields(base)}
    changes: dict[str, Any] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or key not in known:
            raise SystemExit(f"--model-setting {setting!r}: expected key=value with key one of {sorted(known)}")
        try:
            changes[key] = _parse_bool(value) if known[key] is bool else known[key](value)
        except ValueError as exc:
            raise SystemExit(f"--model-setting {setting!r}: {key} takes {known[key].__name__} values ({exc})") from exc
    return replace(base, **changes)


def _parse_bool(text: str) -> bool:
    """`true` or `false` (any case); `bool("false")` would be True."""
    if text.lower() not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def model_fingerprint(model_dir: Path) -> str:
    """A short sha256 of the initial model's weight files: a reused run must have started from the same weights."""
    digest = hashlib.sha256()
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def reused_grpo_run(path: Path, args: argparse.Namespace, fingerprint: str) -> dict[str, Any]:
    """The grpo run of an earlier results file, after checking it was measured with the same settings and initial
    model (`fingerprint`; files from before fingerprints are checked by `check_same_start` after the new run)."""
    record = json.loads(path.read_text())
    record.setdefault("model_settings", [])  # files from before --model-setting used the quickstart model
    checked = {"steps": args.steps, "eval_every": args.eval_every, "overrides": args.overrides}
    checked["model_fingerprint"] = fingerprint
    for key, wanted in {**checked, "model_settings": args.model_setting}.items():
        if key in record and record[key] != wanted:
            raise SystemExit(f"--reuse-grpo {path}: its {key} is {record[key]!r}, this run asks for {wanted!r}")
    grpo = next((r for r in record["runs"] if r["name"] == "grpo"), None)
    if grpo is None:
        raise SystemExit(f"--reuse-grpo {path}: no run named 'grpo' in it")
    print(f"dynamic_sampling: grpo taken from {path} (measured {record.get('date', '?')})", flush=True)
    return {key: value for key, value in grpo.items() if key != "groups_to_reach_grpo_final"}


def check_same_start(reused: dict[str, Any], fresh: dict[str, Any], path: Path) -> None:
    """Refuse a comparison whose two runs did not start at the same held-out accuracy: the reused run was measured
    with another initial model (e.g. the warm start changed since), so their curves say nothing about each other."""
    reused_start, fresh_start = reused["curve"][0][1], fresh["curve"][0][1]
    if reused_start != fresh_start:
        raise SystemExit(
            f"--reuse-grpo {path}: its grpo run started at held-out accuracy {reused_start}, this run's model starts "
            f"at {fresh_start}; the file was measured with another initial model. Run again without --reuse-grpo."
        )


def reused_date(path: Path) -> str:
    """The measurement date of an earlier results file."""
    return json.loads(path.read_text()).get("date", "?")


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Accuracy against sampled prompt groups, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for result in results:
        groups, accuracy = zip(*result["curve"])
        axis.plot(groups, accuracy, marker="o", label=result["name"])
    axis.set_xlabel("prompt groups sampled")
    axis.set_ylabel("held-out greedy accuracy")
    axis.set_title("GRPO vs dynamic sampling, quickstart task")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> int:
    """Run both configurations and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=450, help="GRPO training steps (sets the generation budget)")
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--out", default="benchmarks/results", help="directory for the JSON results and the plot")
    parser.add_argument(
        "--filter-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for the filter run only (repeatable), e.g. trainer.train_batch_size=16",
    )
    parser.add_argument(
        "--reuse-grpo",
        metavar="JSON",
        help="take the grpo run from an earlier results file of this script (same --steps, --eval-every and "
        "overrides, checked) instead of running it again: the run is deterministic on one machine (seeded rollouts)",
    )
    parser.add_argument(
        "--model-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a field of the quickstart's WarmStartSettings (repeatable), e.g. target_low=0.03",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides applied to both runs, key=value")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    quickstart = load_quickstart()
    model = model_settings(quickstart.MODEL, args.model_setting)
    model_dir = get_embedded_model(model)
    fingerprint = model_fingerprint(model_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="dynamic_sampling_") as scratch:
        scratch = Path(scratch)
        write_dataset(scratch / "data", model.task, train_size=8000, test_size=200, difficulty=2, seed=0)
        common = [
            # a constant rate: the filter run stops early (at the budget), so a decaying schedule would not be fair
            "trainer.policy.optimizer.scheduler=constant_with_warmup",
            # the recorded comparisons (docs/algorithms.md) sampled at 1, the quickstart's temperature until 2026-11-27
            "generator.sampling_params.temperature=1.0",
            f"trainer.eval_interval={args.eval_every}",
            "trainer.ckpt_interval=0",
            "trainer.hf_save_interval=-1",
        ]
        base = quickstart.quickstart_overrides(str(model_dir), scratch / "data", scratch / "grpo") + common
        if args.reuse_grpo:
            results.append(reused_grpo_run(Path(args.reuse_grpo), args, fingerprint))
        else:
            results.append(run("grpo", base + [f"trainer.max_training_steps={args.steps}"] + args.overrides))
        filtered = quickstart.quickstart_overrides(str(model_dir), scratch / "data", scratch / "filter") + common
        filtered += ["trainer.algorithm.dynamic_sampling.type=filter", f"trainer.max_training_steps={args.steps}"]
        filtered += args.overrides + args.filter_override
        kind = SkyRLConfig.from_cli_overrides(filtered).trainer.algorithm.dynamic_sampling.type  # filter or replace
        results.append(run(kind, filtered, budget=results[0]["sampled_groups"]))
        if args.reuse_grpo:
            check_same_start(results[0], results[1], Path(args.reuse_grpo))
    target = results[0]["final_accuracy"]
    print(f"\nheld-out accuracy vs prompt groups sampled ({os.cpu_count()} CPUs, {platform.machine()})")
    print(
        f"{'run':8s} {'steps':>6s} {'groups':>8s} {'final acc':>10s} {'groups to reach ' + format(target, '.3f'):>24s}"
    )
    for result in results:
        reach = groups_to_reach(result["curve"], target)
        result["groups_to_reach_grpo_final"] = reach
        reach_text = "never" if reach is None else f"{reach:.0f}"
        print(
            f"{result['name']:8s} {result['steps']:6d} {result['sampled_groups']:8.0f} "
            f"{result['final_accuracy']:10.3f} {reach_text:>24s}"
        )
    record = {
        "benchmark": "dynamic_sampling",
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, {platform.python_version()}",
        "grpo_final_accuracy": target,
        "overrides": args.overrides,
        "model_settings": args.model_setting,
        "model_fingerprint": fingerprint,
        "steps": args.steps,
        "eval_every": args.eval_every,
        "grpo_reused_from": args.reuse_grpo and {"file": args.reuse_grpo, "date": reused_date(Path(args.reuse_grpo))},
        "filter_overrides": args.filter_override,
        "runs": results,
    }
    (out / "dynamic_sampling.json").write_text(json.dumps(record, indent=1))
    plot(results, out / "dynamic_sampling.png")
    print(f"results: {out / 'dynamic_sampling.json'}, plot: {out / 'dynamic_sampling.png'}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
