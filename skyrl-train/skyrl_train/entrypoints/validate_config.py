"""Command line that builds the run config from Hydra overrides, validates it, prints it and exits.

    python -m skyrl_train.entrypoints.validate_config trainer.train_batch_size=64 generator.n_samples_per_prompt=8

Exit status 0 with the resolved YAML on stdout when the config is valid; 2 with a message naming the key to change
when it is not. Training entrypoints accept the same overrides plus `--dry-run`, which does exactly this.
"""

from collections.abc import Sequence

from skyrl_train.config.cli import run_cli


def main(argv: Sequence[str] | None = None) -> None:
    """Resolve, validate and print the config given by `argv` (default: the process arguments)."""
    run_cli(task=None, argv=argv)


if __name__ == "__main__":
    main()
