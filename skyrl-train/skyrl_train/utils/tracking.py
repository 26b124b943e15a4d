"""Experiment tracking: one `Tracker` fans scalar metrics out to named backends (console, wandb, tensorboard, mlflow).

    tracker = Tracker(["console", "tensorboard"], project="skyrl", run_name="gsm8k", config=cfg, log_dir="/tmp/logs",
                      backend_options={"console": {"total_steps": 100}})
    tracker.log({"reward/mean": 0.4, "timing/generate": 1.2}, step=1)
    tracker.finish()
    plot_curves(tracker.history, "/tmp/logs/curves.png")

Backends register by name with `@register_tracking_backend("name")`; users add their own the same way. Optional
backends import their package lazily and fail with a message naming the pip extra to install.
"""

from __future__ import annotations

import importlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from skyrl_train.utils.plain_values import as_scalar, to_jsonable
from skyrl_train.utils.plots import plot_curves

logger = logging.getLogger(__name__)

__all__ = [
    "TRACKING_BACKENDS",
    "Tracker",
    "TrackingBackend",
    "TrackingBackendError",
    "plot_curves",
    "register_tracking_backend",
    "require_package",
]


class TrackingBackendError(RuntimeError):
    """A tracking backend cannot start or write: missing package, no login, bad option (the message says which)."""


class TrackingBackend(ABC):
    """One destination for metrics. Constructed with the run's identity, then `log` per step and `finish` once.

    A backend opens its destination in `start`, which takes the backend's own keyword options (the ones
    `Tracker(backend_options={name: {...}})` gives); the run's identity is already on `self` then.
    """

    def __init__(
        self, project: str, run_name: str, config: Mapping[str, Any] | None, log_dir: str, **options: Any
    ) -> None:
        self.project = project
        self.run_name = run_name
        self.config = config
        self.log_dir = log_dir
        self.start(**options)

    def start(self) -> None:  # noqa: B027 (optional hook: a backend with nothing to open keeps this one)
        """Open the destination; a backend with options declares them as keyword arguments here."""

    @abstractmethod
    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record scalar `metrics` at training `step`."""

    @abstractmethod
    def finish(self) -> None:
        """Flush and close; called once at the end of the run."""


TRACKING_BACKENDS: dict[str, type[TrackingBackend]] = {}
"""Backend classes by the name used in `trainer.logger`."""


def register_tracking_backend(name: str) -> Callable[[type[TrackingBackend]], type[TrackingBackend]]:
    """Class decorator that makes a `TrackingBackend` subclass available under `name`."""

    def decorate(cls: type[TrackingBackend]) -> type[TrackingBackend]:
        if not (isinstance(cls, type) and issubclass(cls, TrackingBackend)):
            raise TypeError(f"tracking backend {name!r} must be a TrackingBackend subclass, got {cls!r}")
        TRACKING_BACKENDS[name] = cls
        return cls

    return decorate


def require_package(module: str, backend: str, extra: str | None = None) -> ModuleType:
    """Import `module` for `backend`, or raise TrackingBackendError naming the pip extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        hint = f"pip install -e './skyrl-train[{extra or backend}]'"  # by path: PyPI's skyrl-train is another project
        raise TrackingBackendError(
            f"tracking backend {backend!r} needs the {module.split('.')[0]!r} package ({error}); install it with {hint}"
        ) from error


class Tracker:
    """Sends each step's scalar metrics to every configured backend and keeps their history for plotting."""

    def __init__(
        self,
        backends: str | Sequence[str],
        project: str,
        run_name: str,
        config: Any = None,
        log_dir: str = "/tmp/skyrl-logs",
        backend_options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Start every backend in `backends` (names from `TRACKING_BACKENDS`).

        `config` (a mapping or dataclass) is handed to the backends as plain values; `backend_options` maps a
        backend name to keyword options of that backend (e.g. `{"console": {"total_steps": 100}}`).
        """
        names = [backends] if isinstance(backends, str) else list(dict.fromkeys(backends))
        unknown = [name for name in names if name not in TRACKING_BACKENDS]
        if unknown:
            raise ValueError(f"unknown tracking backend(s) {unknown}; known: {sorted(TRACKING_BACKENDS)}")
        options = dict(backend_options or {})
        stray = sorted(set(options) - set(names))
        if stray:
            raise ValueError(f"backend_options given for {stray}, which are not among the backends {names}")
        plain_config = to_jsonable(config, "config") if config is not None else None
        self.history: dict[str, list[tuple[int, float]]] = {}
        """Every scalar logged so far: metric name -> [(step, value), ...] in logging order."""
        self._skipped: set[str] = set()
        self._finished = False
        self.backends: dict[str, TrackingBackend] = {}
        try:
            for name in names:
                self.backends[name] = TRACKING_BACKENDS[name](
                    project, run_name, plain_config, log_dir, **options.get(name, {})
                )
        except BaseException:
            self.finish()
            raise

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Record `metrics` at `step` in every backend. Values that are not single numbers are skipped (warned once
        per name)."""
        scalars: dict[str, float] = {}
        for name, value in metrics.items():
            number = as_scalar(value)
            if number is None:
                if name not in self._skipped:
                    self._skipped.add(name)
                    logger.warning("metric %r is a %s, not a number; not tracked", name, type(value).__name__)
                continue
            scalars[name] = number
            self.history.setdefault(name, []).append((step, number))
        if not scalars:
            return
        for backend in self.backends.values():
            backend.log(scalars, step)

    def finish(self) -> None:
        """Close every backend (idempotent); the first error is raised after all backends had their turn."""
        if self._finished:
            return
        self._finished = True
        first_error: BaseException | None = None
        for name, backend in self.backends.items():
            try:
                backend.finish()
            except Exception as error:  # noqa: BLE001 - every backend gets to close
                logger.error("tracking backend %r failed to finish: %s", name, error)
                first_error = first_error or error
        if first_error is not None:
            raise first_error

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.finish()


# The built-in backends register themselves on import.
from skyrl_train.utils import tracking_backends, tracking_console  # noqa: E402, F401
