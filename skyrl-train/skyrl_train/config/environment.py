"""The `environment` section: the default skyrl-gym environment, its worker pool and per-env settings."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EnvironmentConfig:
    """skyrl-gym environments: which one rows default to, how env calls are run, and each env's own settings."""

    env_class: str = "gsm8k"
    """Registered environment id used for dataset rows that have no `env_class` column."""

    max_env_workers: int = 32
    """Threads that run environment `init`/`step` calls concurrently."""

    env_step_timeout_s: float | None = 300.0
    """Seconds one environment `step` may take before the trajectory is ended with an error; null waits forever."""

    env_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per-environment settings, keyed by env id and passed to that env's constructor as `env_config`, e.g.
    `{search: {search_url: "http://127.0.0.1:8000/retrieve", topk: 3}}`. Set one key from the command line with
    `environment.env_configs.search.topk=5`."""
