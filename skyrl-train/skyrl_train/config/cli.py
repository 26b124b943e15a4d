"""The Hydra command line over `ppo_base_config.yaml`, and `run_cli`, the `--dry-run` pattern entrypoints reuse.

`hydra_entry(task)` wraps `task(cfg: SkyRLConfig)` in a `@hydra.main` function; the composed `DictConfig` goes
through `SkyRLConfig.from_dict`, so it is type-checked and validated exactly like `from_cli_overrides`. `run_cli`
adds what a command line needs around it:

    def main() -> None:
        run_cli(train)           # `python -m my.entry a.b=c --dry-run` prints the resolved config and exits

Before Hydra runs, every override is translated from NovaSky-AI/SkyRL's spelling where it uses one
(`config/upstream.py`) and checked against the schema, all of them at once (a typo gets the same "did you mean"
message as in Python); Hydra's output directory and logging set-up are turned off. After validation, every
value that names a registry entry (estimator, loss, env class, engine backend, logger, ...) is checked against the
live registries (`registered_names`), for `--dry-run` too: register your own entries before calling `run_cli`.
"""

import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from skyrl_train.config.errors import ConfigError, ConfigValidationError, ConfigWarning
from skyrl_train.config.overrides import parse_override, to_hydra_override
from skyrl_train.config.root import SkyRLConfig
from skyrl_train.config.run_plan import RunPlan
from skyrl_train.config.upstream import Translation, translate_overrides
from skyrl_train.config.upstream_meanings import dialect_warnings

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


def config_from_hydra(hydra_cfg: object, validate: bool = True) -> SkyRLConfig:
    """Convert a composed Hydra `DictConfig` into a (validated) `SkyRLConfig` (interpolations resolved)."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(hydra_cfg, resolve=True)
    return SkyRLConfig.from_dict(data, validate=validate)  # type: ignore[arg-type]


def _fail(message: str) -> None:
    print(f"config error: {message}", file=sys.stderr)
    raise SystemExit(CONFIG_ERROR_EXIT_CODE)


def hydra_entry(task: Callable[[SkyRLConfig], object], validate: bool = True) -> Callable[[], None]:
    """A `@hydra.main` function over `ppo_base_config.yaml` that validates the config and calls `task` with it
    (`validate=False`: the task validates it).

    Config errors print one readable message and exit with status 2; config warnings are printed to stderr.
    """
    import hydra

    @hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name=CONFIG_NAME)
    def _hydra_main(hydra_cfg: object) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConfigWarning)
            try:
                cfg = config_from_hydra(hydra_cfg, validate=validate)
            except ConfigError as exc:
                _fail(str(exc))
        for warning in caught:
            print(f"config warning: {warning.message}", file=sys.stderr)
        task(cfg)

    return _hydra_main


def _override_key(text: str) -> str:
    return text.lstrip("+~").split("=", 1)[0]


def prepare_hydra_args(args: Sequence[str]) -> list[str]:
    """Translate and check the overrides and return the argument list to hand to Hydra (see `translate_hydra_args`).
    Raises `ConfigError` listing every unknown key and bad value."""
    hydra_args, translation = translate_hydra_args(args)
    translation.raise_problems()
    return hydra_args


def translate_hydra_args(args: Sequence[str], upstream_module: bool = False) -> tuple[list[str], Translation]:
    """The argument list to hand to Hydra, and the translation of the overrides (problems collected, not raised).

    Hydra's own flags (`--cfg job`, `--help`, ...) come first, then quiet defaults for Hydra's outputs (unless given),
    then the overrides in this project's spelling; `hydra.*` and config-group overrides pass through unchanged, and
    `a.b=v` inside a free-form mapping becomes `++a.b=v`. `upstream_module` says the run was started through one of
    NovaSky-AI/SkyRL's module paths.
    """
    flags: list[str] = []
    passthrough: list[str] = []
    parsed = []
    problems: list[ConfigError] = []
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
            passthrough.append(arg)
        else:
            try:
                parsed.append(parse_override(arg))
            except ConfigError as exc:
                problems.append(exc)
    translation = translate_overrides(parsed, SkyRLConfig, upstream_module=upstream_module)
    translation.problems[:0] = problems
    overrides = passthrough + [to_hydra_override(override, SkyRLConfig) for override in translation.overrides]
    given_keys = {_override_key(arg) for arg in overrides}
    quiet = [text for key, text in _HYDRA_QUIET_DEFAULTS.items() if key not in given_keys]
    return flags + quiet + overrides, translation


def render_resolved_config(cfg: SkyRLConfig) -> str:
    """The validated config as YAML, followed by the derived facts (which optional models are built) and the run
    plan (which calls of a step fuse, `RunPlan`)."""
    flags = f"needs_ref_model={cfg.needs_ref_model} needs_critic={cfg.needs_critic}"
    flags += f" needs_reward_model={cfg.needs_reward_model}"
    plan = "".join(f"# {line}\n" for line in RunPlan.from_config(cfg).describe().splitlines())
    return f"# resolved SkyRL config\n{cfg.to_yaml()}# derived: {flags}\n{plan}"


def run_cli(
    task: Callable[[SkyRLConfig], object] | None,
    argv: Sequence[str] | None = None,
    upstream_module: bool = False,
    extra_overrides: Sequence[str] = (),
    trains: bool = True,
) -> None:
    """Run `task` on the config built from command-line overrides; with `--dry-run` (or no task) print it instead.

    `argv` defaults to `sys.argv[1:]`. Invalid configs exit with status 2 and a message naming every key to change.
    `extra_overrides` go before the command line's (an entrypoint's fixed settings, e.g. `trainer.mode=fully_async`);
    `upstream_module` says the run was started through one of NovaSky-AI/SkyRL's module paths. Notes about translated
    SkyRL keys and warnings where a key means something else here go to stderr once, before the run; `trains=False`
    (a run that does not train, e.g. generation only) leaves out the warnings about training keys.
    """
    args = list(extra_overrides) + list(sys.argv[1:] if argv is None else argv)
    dry_run = DRY_RUN_FLAG in args or task is None
    args = [arg for arg in args if arg != DRY_RUN_FLAG]
    hydra_args, translation = translate_hydra_args(args, upstream_module=upstream_module)
    try:
        translation.raise_problems()
    except ConfigError as exc:
        _fail(str(exc))
    for note in translation.notes:
        print(f"config note: {note}", file=sys.stderr)

    def _run(cfg: SkyRLConfig) -> None:
        from skyrl_train.config.registered_names import registered_name_problems

        problems = translation.check_built(cfg)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConfigWarning)
            try:
                cfg.validate()
            except ConfigValidationError as exc:
                problems += exc.problems
        problems += registered_name_problems(cfg)
        if problems:  # every cross-field problem, registry name and checked SkyRL key at once
            _fail(str(ConfigValidationError(problems)))
        messages = [str(warning.message) for warning in caught]
        messages += dialect_warnings(cfg, translation) if trains else []
        for message in messages:
            print(f"config warning: {message}", file=sys.stderr)
        if dry_run:
            print(translation.describe() + render_resolved_config(cfg), end="")
        else:
            task(cfg)  # type: ignore[misc]

    program = sys.argv[0] if sys.argv else "skyrl"
    saved_argv = sys.argv
    sys.argv = [program, *hydra_args]
    try:
        hydra_entry(_run, validate=False)()
    finally:
        sys.argv = saved_argv
