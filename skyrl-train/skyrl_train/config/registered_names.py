"""Checks every config value that names a registry entry against the live registries, before anything starts.

Advantage estimators, policy losses, loss reductions, KL estimators, environments, engine backends, weight-sync
strategies, tracking backends, learning-rate schedules and built-in chat templates are resolved by name when a run
starts; a typo would otherwise surface only after Ray, the workers and the model are up. The check reads the
registries of this process at call time, so names a user registered in their script before the call are seen.
`run_cli` calls it for `--dry-run` and before the task; `BasePPOExp.run` calls it again before `init_ray`, adding
the environment classes the dataset rows name.

Registries are imported lazily: importing `skyrl_train.config` stays cheap.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skyrl_train.config.errors import ConfigValidationError

if TYPE_CHECKING:
    from skyrl_train.config.root import SkyRLConfig


def _algorithm_names(kind: str) -> Callable[[], list[str]]:
    def names() -> list[str]:
        from skyrl_train.algorithms.registry import ALL_REGISTRIES

        return ALL_REGISTRIES[kind].names()

    return names


def _env_names() -> list[str]:
    import skyrl_gym

    return sorted(skyrl_gym.registry)


def _engine_names() -> list[str]:
    from skyrl_train.inference.ray_engine import ENGINE_BUILDERS

    return ENGINE_BUILDERS.names()


def _weight_sync_names() -> list[str]:
    import skyrl_train.weight_sync  # noqa: F401  (registers the built-in strategies)
    from skyrl_train.weight_sync.strategy import WEIGHT_SYNC_STRATEGIES

    return WEIGHT_SYNC_STRATEGIES.names()


def _tracking_names() -> list[str]:
    from skyrl_train.utils.tracking import TRACKING_BACKENDS

    return sorted(TRACKING_BACKENDS)


def _scheduler_names() -> list[str]:
    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION

    return sorted(str(getattr(kind, "value", kind)) for kind in TYPE_TO_SCHEDULER_FUNCTION)


def _chat_template_names() -> list[str]:
    from skyrl_train.models.chat_templates import BUILTIN_CHAT_TEMPLATES

    return sorted(BUILTIN_CHAT_TEMPLATES)


def _workflow_names() -> list[str]:
    from skyrl_train.generators.workflow import ROLLOUT_WORKFLOWS

    return ROLLOUT_WORKFLOWS.names()


@dataclass(frozen=True)
class RegistryLookup:
    """One kind of registered name: how to list the live names and how users add one."""

    kind: str
    names: Callable[[], list[str]]
    how_to_add: str
    """A sentence telling how a user adds a name of this kind."""


LOOKUPS: dict[str, RegistryLookup] = {
    "advantage estimator": RegistryLookup(
        "advantage estimator",
        _algorithm_names("advantage estimator"),
        'Register your own with @register_advantage_estimator("name").',
    ),
    "policy loss": RegistryLookup(
        "policy loss", _algorithm_names("policy loss"), 'Register your own with @register_policy_loss("name").'
    ),
    "loss reduction": RegistryLookup(
        "loss reduction", _algorithm_names("loss reduction"), 'Register your own with @register_loss_reduction("name").'
    ),
    "KL estimator": RegistryLookup(
        "KL estimator", _algorithm_names("KL estimator"), 'Register your own with @register_kl_estimator("name").'
    ),
    "environment": RegistryLookup(
        "environment", _env_names, 'Register your own with skyrl_gym.register(id="name", entry_point=...).'
    ),
    "engine backend": RegistryLookup(
        "engine backend", _engine_names, 'Register your own with @ENGINE_BUILDERS.register("name").'
    ),
    "weight sync strategy": RegistryLookup(
        "weight sync strategy", _weight_sync_names, 'Register your own with @register_weight_sync_strategy("name").'
    ),
    "tracking backend": RegistryLookup(
        "tracking backend", _tracking_names, 'Register your own with @register_tracking_backend("name").'
    ),
    "learning-rate schedule": RegistryLookup(
        "learning-rate schedule", _scheduler_names, "These are the schedules transformers.get_scheduler builds."
    ),
    "rollout workflow": RegistryLookup(
        "rollout workflow", _workflow_names, 'Register your own with @register_workflow("name").'
    ),
    "chat template": RegistryLookup(
        "chat template",
        _chat_template_names,
        "For your own template use generator.chat_template.source=file with a Jinja file.",
    ),
}
"""Every kind of registry a config value can name, by kind."""


def named_values(cfg: SkyRLConfig) -> list[tuple[str, str, Any]]:
    """`(key, kind, value)` for every config value resolved through a registry in this config."""
    algorithm = cfg.trainer.algorithm
    engine = cfg.generator.inference_engine
    values: list[tuple[str, str, Any]] = [
        ("trainer.algorithm.advantage_estimator", "advantage estimator", algorithm.advantage_estimator),
        ("trainer.algorithm.policy_loss_type", "policy loss", algorithm.policy_loss_type),
        ("trainer.algorithm.loss_reduction", "loss reduction", algorithm.loss_reduction),
        ("trainer.algorithm.kl_estimator_type", "KL estimator", algorithm.kl_estimator_type),
        ("environment.env_class", "environment", cfg.environment.env_class),
        ("generator.inference_engine.backend", "engine backend", engine.backend),
    ]
    if engine.weight_sync_backend != "auto":
        values.append(
            ("generator.inference_engine.weight_sync_backend", "weight sync strategy", engine.weight_sync_backend)
        )
    loggers = [cfg.trainer.logger] if isinstance(cfg.trainer.logger, str) else list(cfg.trainer.logger)
    values += [("trainer.logger", "tracking backend", name) for name in loggers]
    roles = ["policy", "critic"] if cfg.needs_critic else ["policy"]
    values += [
        (
            f"trainer.{role}.optimizer.scheduler",
            "learning-rate schedule",
            getattr(cfg.trainer, role).optimizer.scheduler,
        )
        for role in roles
    ]
    if cfg.generator.workflow is not None:
        values.append(("generator.workflow", "rollout workflow", cfg.generator.workflow))
    template = cfg.generator.chat_template
    if template.source == "name" and template.name_or_path is not None:
        values.append(("generator.chat_template.name_or_path", "chat template", template.name_or_path))
    return values


def unknown_name_message(subject: str, kind: str, value: Any, known: list[str]) -> str:
    """`<subject> is not a registered <kind>. Did you mean ...? Registered: [...]. <how to add one>`; a name of
    NovaSky-AI/SkyRL's that this project lacks is named as such, as not supported here."""
    from skyrl_train.config.upstream_keys import UPSTREAM_NAMES

    upstream = UPSTREAM_NAMES.get((kind, str(value)))
    if upstream is not None:
        return (
            f"{subject} is {upstream}, which is not supported here. Registered {kind}s: {known}."
            f" {LOOKUPS[kind].how_to_add}"
        )
    close = difflib.get_close_matches(str(value), known, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(name) for name in close)}?" if close else ""
    return f"{subject} is not a registered {kind}.{hint} Registered: {known}. {LOOKUPS[kind].how_to_add}"


def registered_name_problems(cfg: SkyRLConfig, dataset_env_classes: Mapping[str, str] | None = None) -> list[str]:
    """A message for every registry name in `cfg` (and in `dataset_env_classes`: env class -> where it was seen)
    that the live registries do not hold."""
    cache: dict[str, list[str]] = {}

    def known(kind: str) -> list[str]:
        if kind not in cache:
            cache[kind] = LOOKUPS[kind].names()
        return cache[kind]

    problems = []
    for key, kind, value in named_values(cfg):
        if value not in known(kind):
            problems.append(unknown_name_message(f"{key}={value!r}", kind, value, known(kind)))
    for env_class, where in sorted((dataset_env_classes or {}).items()):
        if env_class not in known("environment"):
            subject = f"env_class {env_class!r} of the dataset rows ({where})"
            problems.append(unknown_name_message(subject, "environment", env_class, known("environment")))
    return problems


def check_registered_names(cfg: SkyRLConfig, dataset_env_classes: Mapping[str, str] | None = None) -> None:
    """Raise `ConfigValidationError` listing every unregistered name (see `registered_name_problems`)."""
    problems = registered_name_problems(cfg, dataset_env_classes)
    if problems:
        raise ConfigValidationError(problems)
