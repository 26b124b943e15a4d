"""The Hydra command line over `ppo_base_config.yaml`, and `run_cli`, the `--dry-run` pattern entrypoints reuse.

`hydra_entry(task)` wraps `task(cfg: SkyRLConfig)` in a `@hydra.main` function; the composed `DictConfig` goes
through `SkyRLConfig.from_dict`, so it is type-checked and validated exactly like `from_cli_overrides`. `run_cli`
adds what a command line needs around it:

    def main() -> None:
        run_cli(train)           # `python -m my.entry a.b=c --dry-run` prints the resolved config and exits

Before Hydra runs, every override key is checked against the schema (so a typo gets the same "did you mean"
message as in Python), and Hydra's output directory and logging set-up are turned off. After validation, every
value that names a registry entry (estimator, loss, env class, engine backend, logger, ...) is checked against the
live registries (`registered_names`), for `--dry-run` too: register your own entries before calling `run_cli`.
"""

import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from skyrl_train.config.auto_settings import describe_choices, resolve_auto_settings
from skyrl_train.config.errors import ConfigError, ConfigWarning
from skyrl_train.config.overrides import parse_override, to_hydra_override
from skyrl_train.config.root import SkyRLConfig
from skyrl_train.config.run_plan import RunPlan

CONFIG_DIR = Path(__file__).resolve().parent
"""Directory holding `ppo_base_config.yaml`."""

CONFIG_NAME = "ppo_base_config"
"""Name of the Hydra primary config (the YAML file without extension)."""

DRY_RUN_FLAG = "--dry-run"
"""Flag that makes `run_cli` print the validated config and exit instead of running the task."""

CONFIG_ERROR_EXIT_CODE = 2
"""Exit status of the command line when the config is invalid."""

_HYDRA_QUIET_DEFAULTS = {
    "hydra.run.dir": "hydra.run.dir=.",
    "hydra.output_subdir": "hydra.output_subdir=null",
    "hydra/job_logging": "hydra/job_logging=none",
    "hydra/hydra_logging": "hydra/hydra_logging=none",
}
_HYDRA_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn"}
_HYDRA_FLAGS_WITH_VALUE |= {"--config-dir", "-cd", "--experimental-rerun", "--info", "-i"}


def config_from_hydra(hydra_cfg: object) -> SkyRLConfig:
    """Convert a composed Hydra `DictConfig` into a validated `SkyRLConfig` (interpolations resolved)."""
    from omegaconf import OmegaConf

    return SkyRLConfig.from_dict(OmegaConf.to_container(hydra_cfg, resolve=True))  # type: ignore[arg-type]


def _fail(message: str) -> None:
    print(f"config error: {message}", file=sys.stderr)
    raise SystemExit(CONFIG_ERROR_EXIT_CODE)


def hydra_entry(task: Callable[[SkyRLConfig], object]) -> Callable[[], None]:
    """A `@hydra.main` function over `ppo_base_config.yaml` that validates the config and calls `task` with it.

    Config errors print one readable message and exit with status 2; config warnings are printed to stderr.
    """
    import hydra

    @hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name=CONFIG_NAME)
    def _hydra_main(hydra_cfg: object) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConfigWarning)
            try:
                cfg = config_from_hydra(hydra_cfg)
            except ConfigError as exc:
                _fail(str(exc))
        for warning in caught:
            print(f"config warning: {warning.message}", file=sys.stderr)
        task(cfg)

    return _hydra_main


def _override_key(text: str) -> str:
    return text.lstrip("+~").split("=", 1)[0]


def prepare_hydra_args(args: Sequence[str]) -> list[str]:
    """Check each override's key against the schema and return the argument list to hand to Hydra.

    Hydra's own flags (`--cfg job`, `--help`, ...) come first, then quiet defaults for Hydra's outputs (unless given),
    then the overrides; `hydra.*` and config-group overrides pass through unchanged, and `a.b=v` inside a free-form
    mapping becomes `++a.b=v`. Raises `ConfigError` (with close-match suggestions for unknown keys).
    """
    flags: list[str] = []
    overrides: list[str] = []
    expects_flag_value = False
    for arg in args:
        if expects_flag_value and "=" not in arg:
            flags.append(arg)
            expects_flag_value = False
            continue
        expects_flag_value = arg in _HYDRA_FLAGS_WITH_VALUE
        key = _override_key(arg)
        if arg.startswith("-"):
            flags.append(arg)
        elif key == "hydra" or key.startswith("hydra.") or "/" in key or "@" in key:
            overrides.append(arg)
        else:
            overrides.append(to_hydra_override(parse_override(arg), SkyRLConfig))
    given_keys = {_override_key(arg) for arg in overrides}
    quiet = [text for key, text in _HYDRA_QUIET_DEFAULTS.items() if key not in given_keys]
    return flags + quiet + overrides


def render_resolved_config(cfg: SkyRLConfig) -> str:
    """The validated config as YAML with every `auto` speed setting resolved, followed by the derived facts (which
    optional models are built), what each `auto` chose and why (`auto_settings`), and the run plan (which calls of a
    step fuse, `RunPlan`)."""
    cfg, choices = resolve_auto_settings(cfg)
    flags = f"needs_ref_model={cfg.needs_ref_model} needs_critic={cfg.needs_critic}"
    flags += f" needs_reward_model={cfg.needs_reward_model}"
    text = describe_choices(choices) + RunPlan.from_config(cfg).describe()
    comments = "".join(f"# {line}\n" for line in text.splitlines())
    return f"# resolved SkyRL config\n{cfg.to_yaml()}# derived: {flags}\n{comments}"


def run_cli(task: Callable[[SkyRLConfig], object] | None, argv: Sequence[str] | None = None) -> None:
    """Run `task` on the config built from command-line overrides; with `--dry-run` (or no task) print it instead.

    `argv` defaults to `sys.argv[1:]`. Invalid configs exit with status 2 and a message naming the key to change.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    dry_run = DRY_RUN_FLAG in args or task is None
    args = [arg for arg in args if arg != DRY_RUN_FLAG]
    try:
        hydra_args = prepare_hydra_args(args)
    except ConfigError as exc:
        _fail(str(exc))

    def _run(cfg: SkyRLConfig) -> None:
        from skyrl_train.config.registered_names import check_registered_names

        try:
            check_registered_names(cfg)
        except ConfigError as exc:
            _fail(str(exc))
        if dry_run:
            print(render_resolved_config(cfg), end="")
        else:
            task(cfg)  # type: ignore[misc]

    program = sys.argv[0] if sys.argv else "skyrl"
    saved_argv = sys.argv
    sys.argv = [program, *hydra_args]
    try:
        hydra_entry(_run)()
    finally:
        sys.argv = saved_argv
