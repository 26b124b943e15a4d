"""Command line that builds (or finds) the cached embedded model and prints its folder and measured accuracy.

    python -m skyrl_train.entrypoints.build_embedded_model --task arithmetic --difficulty 2 --size 3 [--threads 1]

Every `WarmStartSettings` field is an option (`--max-steps 300`, `--lr 0.003`, ...); unset ones keep their defaults.
`--rebuild` builds afresh even when a valid cache entry exists. Exit status 0 on success, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Sequence
from dataclasses import fields
from typing import Any, Optional

from skyrl_train.recipes.embedded import get_embedded_model, read_description
from skyrl_train.recipes.warm_start import WarmStartSettings


def build_parser() -> argparse.ArgumentParser:
    """The parser: one option per `WarmStartSettings` field, plus `--threads`, `--rebuild` and `--no-progress`."""
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_train.entrypoints.build_embedded_model",
        description="Warm-start the tiny model on a synthetic task (cached under $SKYRL_CACHE/embedded).",
    )
    hints = typing.get_type_hints(WarmStartSettings)
    for settings_field in fields(WarmStartSettings):
        option = "--" + settings_field.name.replace("_", "-")
        choices = typing.get_args(hints[settings_field.name]) or None
        value_type = str if choices else type(settings_field.default)
        parser.add_argument(
            option,
            dest=settings_field.name,
            type=value_type,
            choices=choices,
            default=None,
            help=f"default {settings_field.default!r}",
        )
    parser.add_argument("--threads", type=int, default=None, help="torch threads for the build (default: torch's)")
    parser.add_argument("--rebuild", action="store_true", help="build afresh even if a valid cache entry exists")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def settings_from_args(args: argparse.Namespace) -> WarmStartSettings:
    """The settings named on the command line, defaults elsewhere."""
    given: dict[str, Any] = {
        f.name: getattr(args, f.name) for f in fields(WarmStartSettings) if getattr(args, f.name) is not None
    }
    return WarmStartSettings(**given)


def summary(description: dict[str, Any]) -> str:
    """Human-readable lines about a built model: parameters, steps, greedy and sampled accuracy."""
    accuracy, sampled = description["accuracy"], description["accuracy"]["sampled"]
    warm = description["warm_start"]
    return "\n".join(
        [
            f"parameters: {description['model']['num_parameters']:,}",
            f"warm start: {warm['steps']} steps, {warm['train_seconds']} s (reached target: {warm['reached_target']}, "
            f"in band: {warm['in_target_band']})",
            f"greedy accuracy on {accuracy['held_out_problems']} held-out problems: {accuracy['greedy']:.3f}",
            f"sampled (T=1, n={sampled['n']}, {sampled['prompts']} prompts): accuracy {sampled['accuracy']:.3f}, "
            f"well-formed {sampled['well_formed']:.3f}, pass@{sampled['n']} "
            f"{sampled['prompts_with_a_correct_sample']:.3f}, mixed-reward prompts "
            f"{sampled['prompts_with_mixed_rewards']:.3f}",
        ]
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Build or find the model; print its folder and accuracy. Returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        parser.print_usage(sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    path = get_embedded_model(settings, progress=not args.no_progress, rebuild=args.rebuild)
    print(f"embedded model: {path}")
    print(summary(read_description(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
