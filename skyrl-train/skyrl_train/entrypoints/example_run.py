"""What the CPU example scripts share around their own config: the command line, the CPU stack, `--dry-run`, the run
and the report.

Each example (`examples/quickstart`, `ppo`, `custom_env`, `agent`) keeps its algorithm, batch shape and schedule as an
explicit list of overrides; this module holds the plumbing they would otherwise each write again: the overrides that
put a run on CPU workers with hf engines (`cpu_stack_overrides`), give rollouts and evaluation one answer budget
(`answer_length_overrides`) and send its outputs under one folder (`output_overrides`); the start of a run
(`start_run`); and `ExampleRun`, a finished run and its summary lines.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.cli import render_resolved_config
from skyrl_train.config.registered_names import check_registered_names
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.trainer import TrainResult


class ExampleParser(argparse.ArgumentParser):
    """An example's command line: `--out`, `--train-size`, `--test-size`, `--dry-run` and key=value overrides.

    Options and overrides may come in any order (`parse`); `--out` comes back as an absolute path. With `max_test_size` (the warm start's held-out count),
    a larger `--test-size` is refused: the test split must be problems the warm start never trained on. An example
    adds its own options with `add_argument` as usual.
    """

    def __init__(
        self, description: Optional[str], *, out: str, train_size: int, test_size: int, max_test_size: Optional[int]
    ) -> None:
        super().__init__(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
        self.max_test_size = max_test_size
        self.add_argument("--out", type=Path, default=out, help="where data, checkpoints and exports go")
        self.add_argument("--train-size", type=int, default=train_size)
        limit = None if max_test_size is None else f"at most {max_test_size}: the warm start's held-out problems"
        self.add_argument("--test-size", type=int, default=test_size, help=limit)
        self.add_argument(
            "--dry-run", action="store_true", help="print the resolved config and exit (builds and writes nothing)"
        )
        self.add_argument("overrides", nargs="*", help="config overrides, key=value")

    def parse(self, argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
        """Parse `argv` (default: the command line); exits with a usage error on a `--test-size` over the limit."""
        args = self.parse_intermixed_args(argv)
        if self.max_test_size is not None and args.test_size > self.max_test_size:
            self.error(f"--test-size must be at most {self.max_test_size} (the warm start's held-out problems)")
        args.out = args.out.resolve()
        return args


def check_test_size(test_size: int, max_test_size: int) -> None:
    """Refuse (ValueError) a test split larger than the warm start's `max_test_size` held-out problems: only those
    were never trained on. What `ExampleParser` checks on the command line, for an example called from Python."""
    if test_size > max_test_size:
        raise ValueError(f"test_size must be at most {max_test_size} (the warm start's held-out problems)")


def cpu_stack_overrides(
    model_dir: str, train_data: Path, val_data: Path, *, ranks: int, num_engines: int, colocate: bool = True
) -> list[str]:
    """The policy `model_dir` on `ranks` CPU workers (one CPU each) next to `num_engines` hf engines, all in float32,
    trained on `train_data` and evaluated on `val_data` (one file each); the engines share the workers' slots when
    `colocate`. Other roles (critic, reference) add their own placement and dtype keys."""
    return [
        "trainer.device=cpu",
        f"trainer.policy.model.path={model_dir}",
        f"data.train_data=['{train_data}']",
        f"data.val_data=['{val_data}']",
        f"trainer.placement.colocate_all={'true' if colocate else 'false'}",
        f"trainer.placement.policy_num_gpus_per_node={ranks}",
        "trainer.placement.num_cpus_per_worker=1",
        "generator.inference_engine.backend=hf",
        f"generator.inference_engine.num_engines={num_engines}",
        "generator.inference_engine.model_dtype=float32",
        "trainer.policy.fsdp.mixed_precision.param_dtype=float32",
        "trainer.policy.gradient_checkpointing=false",
    ]


def answer_length_overrides(max_tokens: int) -> list[str]:
    """The same answer budget, `max_tokens` generated tokens (per model turn), for training rollouts and evaluation."""
    return [
        f"generator.sampling_params.max_generate_length={max_tokens}",
        f"generator.eval_sampling_params.max_generate_length={max_tokens}",
    ]


def output_overrides(out_dir: Path) -> list[str]:
    """A fresh run (no resume) that writes its checkpoints, exports and logs under `out_dir` and logs to the console."""
    return [
        "trainer.resume_mode=none",
        f"trainer.ckpt_path={out_dir / 'ckpts'}",
        f"trainer.export_path={out_dir / 'exports'}",
        f"trainer.log_path={out_dir / 'logs'}",
        "trainer.logger=['console']",
    ]


@dataclass
class ExampleRun:
    """A finished run: its config, the trainer's result and the experiment (checkpoints, curve plot)."""

    cfg: SkyRLConfig
    result: TrainResult
    experiment: BasePPOExp

    @classmethod
    def train(cls, cfg: SkyRLConfig, **experiment_kwargs: Any) -> ExampleRun:
        """Run `BasePPOExp` on `cfg` to the end (`experiment_kwargs` go to its constructor)."""
        experiment = BasePPOExp(cfg, **experiment_kwargs)
        result = experiment.run()
        return cls(cfg, result, experiment)

    def print_summary(self, started: float, *, curves: bool = True) -> None:
        """The report's closing lines: steps trained and seconds since `started` (a `start_run` time, so set-up is
        included), and, with `curves`, where the curve plot is."""
        print(f"  steps: {self.result.global_step} in {time.perf_counter() - started:.0f} s (including set-up)")
        if curves:
            print(f"  curves: {self.experiment.plot_path}")

    def eval_value(self, metric: str) -> tuple[float, float]:
        """`eval/all/<metric>` before and after training (NaN when that evaluation did not run)."""
        return eval_before_after(self.result, metric)

    def eval_accuracy(self) -> tuple[float, float]:
        """Held-out pass@n before and after training (NaN when evaluation was off)."""
        return self.eval_value(f"pass_at_{self.cfg.generator.eval_n_samples_per_prompt}")


def start_run() -> float:
    """Start an example's run: library logging to the console from WARNING up; returns the start time (a
    `time.perf_counter` value) that `ExampleRun.print_summary` measures from."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return time.perf_counter()


def print_resolved_config(overrides: Sequence[str]) -> None:
    """What an example's `--dry-run` prints: the config `overrides` build, after checking every registry name."""
    cfg = SkyRLConfig.from_cli_overrides(list(overrides))
    check_registered_names(cfg)
    print(render_resolved_config(cfg), end="")


def eval_before_after(result: TrainResult, metric: str) -> tuple[float, float]:
    """`eval/all/<metric>` before and after training (NaN when that evaluation did not run)."""
    key = f"eval/all/{metric}"
    return result.initial_eval.get(key, float("nan")), result.final_eval.get(key, float("nan"))


def print_first_and_last(history: Mapping[str, list[tuple[int, float]]], keys: Iterable[str]) -> None:
    """One line per logged metric of `keys`: its first and last value over the run."""
    for key in keys:
        if history.get(key):
            print(f"  {key}: first {history[key][0][1]:.4f} last {history[key][-1][1]:.4f}")
