"""Benchmark: where the quickstart's training step goes, phase by phase, and how much of it is not model compute.

Runs the quickstart configuration (`examples/quickstart/run_quickstart.py`: Ray, 2 FSDP2 policy ranks, 2 colocated
`hf` engines, shm weight sync, 32 prompts x 8 samples) for `--steps` steps without evaluation or checkpoints, and
averages over the steps after `--warmup-steps`:

- wall seconds per phase of `RayPPOTrainer.step` (`timing/*`), and the rest of the step (engine sleep / wake-up);
- model compute, measured inside the actors (`ComputeClock`): the engines' batched decode calls (slowest engine)
  and each worker group's `forward`, `forward_backward` and `optim_step` bodies (slowest rank), which include the
  FSDP collectives but not Ray scheduling, argument transfer, env scoring or the driver's own work.

The baseline is the model compute itself: the table ends with step time / model compute and the share of the step
spent outside model compute (framework overhead), then the training loop's own time between two steps (logging,
health checks, drawing the next batch; the benchmark's clock reads left out), which `timing/step` does not contain:
nothing may hide there.

    python benchmarks/step_breakdown.py [--steps 30] [--warmup-steps 3] [--results PATH] [key=value ...]

`--shape long` runs the long-response shape of the comparison with TRL instead (`shapes.LONG`: the 21 M-parameter
model warm-started on binary conversion with shown work, 4 prompts x 4 samples of up to 330 tokens, our side with
default keys: `shapes.ours_overrides`).

`--results benchmarks/results/step_breakdown.json` also writes the table, the machine, the date and the load average
around the run, which `scripts/render_doc_results.py` renders on docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import ray

from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.recipes.embedded import get_embedded_model
from skyrl_train.trainer import RayPPOTrainer

REPO = Path(__file__).resolve().parent.parent
PHASES = ["generate", "reward", "fwd_logprobs", "advantages", "train_critic", "train_policy", "weight_sync"]


def load_quickstart() -> Any:
    """The quickstart module (its `MODEL` settings and `quickstart_overrides`), loaded from its file."""
    path = REPO / "examples" / "quickstart" / "run_quickstart.py"
    spec = importlib.util.spec_from_file_location("run_quickstart", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class MeasuredTrainer(RayPPOTrainer):
    """`RayPPOTrainer` that adds each step's model compute, read from the actors' clocks, as `compute/*` metrics."""

    def __init__(self, *args: Any, engines: list[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.engine_handles = [engine.handle for engine in engines]
        self.step_starts: list[float] = []  # wall clock at each step's start
        self.reading_seconds: list[float] = []  # per step, the time this class spent reading the actors' clocks

    def _group_seconds(self, group: Any) -> float:
        per_rank = ray.get([actor.take_compute_seconds.remote() for actor in group.actors])
        return max(sum(seconds.values()) for seconds in per_rank)

    def _groups(self) -> list[tuple[str, Any]]:
        roles = (("policy", self.policy), ("ref", self.ref), ("critic", self.critic))
        return [(role, client.group) for role, client in roles if client is not None]

    def _engine_seconds(self) -> list[dict[str, float]]:
        return ray.get([handle.take_compute_seconds.remote() for handle in self.engine_handles])

    async def step(self) -> Optional[dict[str, float]]:
        """One training step, then `compute/generate` (slowest engine) and `compute/<role>` (slowest rank)."""
        start = time.perf_counter()
        self.step_starts.append(start)
        # The clocks are read with blocking `ray.get`s: awaiting them would let the event loop run tasks that the
        # plain trainer's loop only reaches inside its next step (the engines' install of the synced weights was
        # one: awaited reads gave it a free slot between steps and the table ~1 ms less overhead than a real run).
        self._engine_seconds()  # drop whatever evaluation or set-up left on the clocks
        for _, group in self._groups():
            self._group_seconds(group)
        stepped = time.perf_counter()
        metrics = await super().step()
        if metrics is None:
            return None
        reading = time.perf_counter()
        metrics["compute/generate"] = max(sum(seconds.values()) for seconds in self._engine_seconds())
        for role, group in self._groups():
            metrics[f"compute/{role}"] = self._group_seconds(group)
        self.reading_seconds.append((stepped - start) + (time.perf_counter() - reading))
        return metrics


class MeasuredExp(BasePPOExp):
    """The quickstart experiment with `MeasuredTrainer`."""

    def get_inference_engines(self, placement: Any) -> list[Any]:
        """Keep the engine proxies: the trainer reads their actors' clocks."""
        self.engine_proxies = super().get_inference_engines(placement)
        return self.engine_proxies

    def get_trainer(self, **parts: Any) -> RayPPOTrainer:
        """The measuring trainer."""
        self.trainer = MeasuredTrainer(self.cfg, engines=self.engine_proxies, **parts)
        return self.trainer


def between_steps_seconds(trainer: MeasuredTrainer, skip: int) -> float:
    """Mean wall time from one step's start to the next's, less the step itself and this benchmark's clock reads:
    the loop's work outside `step()` (logging, health checks, the next batch), which `timing/step` does not see."""
    starts, reads = trainer.step_starts, trainer.reading_seconds
    step_seconds = dict(trainer.tracker.history.get("timing/step", []))  # global step -> seconds
    gaps = [
        later - start - reads[index] - step_seconds.get(index + 1, 0.0)
        for index, (start, later) in enumerate(zip(starts, starts[1:]))
        if index + 1 > skip
    ]
    return statistics.mean(gaps) if gaps else 0.0


def mean_after(history: dict[str, list[tuple[int, float]]], key: str, skip: int) -> float:
    """Mean of metric `key` over the steps after the first `skip` (0 when it was never logged)."""
    values = [value for step, value in history.get(key, []) if step > skip]
    return statistics.mean(values) if values else 0.0


def breakdown_rows(
    history: dict[str, list[tuple[int, float]]], skip: int, between: float = 0.0
) -> list[tuple[str, float, float]]:
    """(name, mean seconds, share of step) for each phase, the unphased rest, the compute parts and the total, and the
    loop's time `between` steps."""
    step = mean_after(history, "timing/step", skip)
    rows = []
    phased = 0.0
    for phase in PHASES:
        if f"timing/{phase}" in history:
            seconds = mean_after(history, f"timing/{phase}", skip)
            phased += seconds
            rows.append((phase, seconds, seconds / step))
    rows.append(("(rest: sleep / wake-up, driver)", step - phased, (step - phased) / step))
    rows.append(("step", step, 1.0))
    compute = 0.0
    for key in sorted(k for k in history if k.startswith("compute/")):
        seconds = mean_after(history, key, skip)
        compute += seconds
        rows.append((f"model compute: {key.split('/', 1)[1]}", seconds, seconds / step))
    rows.append(("model compute, total", compute, compute / step))
    rows.append(("outside model compute", step - compute, (step - compute) / step))
    rows.append(("between steps (not in step)", between, between / step))
    return rows


def shape_overrides(shape: str, out: Path, steps: int) -> list[str]:
    """The config of the run: the quickstart's, or the long-response shape's with default keys (`shapes.LONG`);
    either without evaluation or checkpoints. Writes the data into `out`."""
    if shape == "long":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from shapes import LONG, ours_overrides

        model_dir = get_embedded_model(LONG.model)
        task = LONG.model
        write_dataset(out / "data", task.task, train_size=2000, test_size=16, difficulty=task.difficulty, seed=0)
        return ours_overrides(LONG, model_dir, out / "data", out, steps, seed=0)
    quickstart = load_quickstart()
    model_dir = get_embedded_model(quickstart.MODEL)
    write_dataset(out / "data", quickstart.MODEL.task, train_size=2000, test_size=16, difficulty=2, seed=0)
    return quickstart.quickstart_overrides(str(model_dir), out / "data", out) + [
        f"trainer.max_training_steps={steps}",
        "trainer.eval_before_train=false",
        "trainer.eval_interval=0",
        "trainer.ckpt_interval=0",
        "trainer.hf_save_interval=-1",
    ]


def main() -> int:
    """Run the measured quickstart and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30, help="training steps to run")
    parser.add_argument("--warmup-steps", type=int, default=3, help="first steps left out of the averages")
    parser.add_argument("--results", type=Path, help="also write the table and the machine to this JSON file")
    parser.add_argument("--shape", choices=["quickstart", "long"], default="quickstart", help="configuration to run")
    parser.add_argument("overrides", nargs="*", help="extra config overrides, key=value")
    args = parser.parse_args()
    if args.steps <= args.warmup_steps:
        parser.error(f"--steps ({args.steps}) must exceed --warmup-steps ({args.warmup_steps})")
    logging.basicConfig(level=logging.WARNING)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="step_breakdown_") as scratch:
        out = Path(scratch)
        overrides = shape_overrides(args.shape, out, args.steps)
        cfg = SkyRLConfig.from_cli_overrides(overrides + args.overrides)
        exp = MeasuredExp(cfg)
        result = exp.run()
    rows = breakdown_rows(result.history, args.warmup_steps, between_steps_seconds(exp.trainer, args.warmup_steps))
    print(
        f"\n{args.shape} step breakdown: mean of steps {args.warmup_steps + 1}-{result.global_step}, "
        f"{os.cpu_count()} CPUs"
    )
    print(f"{'part':34s} {'seconds':>9s} {'share':>7s}")
    for name, seconds, share in rows:
        print(f"{name:34s} {seconds:9.4f} {share:7.1%}")
    seconds_of = {name: seconds for name, seconds, _ in rows}
    step, compute = seconds_of["step"], seconds_of["model compute, total"]
    print(f"step time / model compute: {step / max(compute, 1e-9):.2f}x")
    if args.results is not None:
        write_results(args, rows, result.global_step, (load_before, os.getloadavg()[0]))
    return 0


def write_results(args: argparse.Namespace, rows: list[tuple[str, float, float]], steps: int, load: tuple) -> None:
    """The breakdown as JSON for the docs: rows, steps averaged, overrides, machine, date and load average."""
    data = {
        "benchmark": "step_breakdown",
        "configuration": args.shape,
        "rows": [{"part": name, "seconds": seconds, "share": share} for name, seconds, share in rows],
        "steps": steps,
        "warmup_steps": args.warmup_steps,
        "overrides": args.overrides,
        "load_average_1min": {"before": load[0], "after": load[1]},
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, {platform.python_version()}",
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(data, indent=1) + "\n")
    print(f"results written to {args.results}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
