"""What the CPU example scripts share around their own config: the command line, `--dry-run` and the report.

Each example (`examples/quickstart`, `ppo`, `custom_env`, `agent`) keeps its config as an explicit list of
overrides; this module holds the plumbing they would otherwise each write again.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from typing import Optional

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.cli import render_resolved_config
from skyrl_train.config.registered_names import check_registered_names
from skyrl_train.trainer import TrainResult


class ExampleParser(argparse.ArgumentParser):
    """An example's command line: `--out`, `--train-size`, `--test-size`, `--dry-run` and key=value overrides.

    Options and overrides may come in any order (`parse`). With `max_test_size` (the warm start's held-out count),
    a larger `--test-size` is refused: the test split must be problems the warm start never trained on. An example
    adds its own options with `add_argument` as usual.
    """

    def __init__(
        self, description: Optional[str], *, out: str, train_size: int, test_size: int, max_test_size: Optional[int]
    ) -> None:
        super().__init__(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
        self.max_test_size = max_test_size
        self.add_argument("--out", default=out, help="where data, checkpoints and exports go")
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
        return args


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
