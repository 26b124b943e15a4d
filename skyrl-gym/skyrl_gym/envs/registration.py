"""The environment registry: `register`, `make`, `spec`, `deregister`, `pprint_registry`."""

from __future__ import annotations

import difflib
import functools
import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Union

from skyrl_gym.core import Env
from skyrl_gym.errors import RegistrationError, UnknownEnvError

EntryPoint = Union[str, Callable[..., Env]]


@dataclass(frozen=True)
class EnvSpec:
    """How to build one registered environment: its id, entry point and default constructor kwargs."""

    id: str
    entry_point: EntryPoint
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def load(self) -> Callable[..., Env]:
        """Resolve the entry point to a callable (importing "module:Attr" lazily, once: an env is made per episode)."""
        if callable(self.entry_point):
            return self.entry_point
        return self._loaded

    @functools.cached_property
    def _loaded(self) -> Callable[..., Env]:
        """The resolved "module:Attr" entry point (a failure is not kept: the next `load` tries again)."""
        module_name, sep, attr = self.entry_point.partition(":")
        if not sep or not module_name or not attr:
            raise RegistrationError(f"env '{self.id}': entry point {self.entry_point!r} is not 'module:Attr'")
        try:  # an env is made per episode: a module imported already is looked up without the import machinery
            module = sys.modules.get(module_name) or importlib.import_module(module_name)
        except ImportError as exc:
            raise RegistrationError(
                f"env '{self.id}': cannot import module '{module_name}' of entry point {self.entry_point!r}: {exc}"
            ) from exc
        target: Any = module
        for part in attr.split("."):
            if not hasattr(target, part):
                raise RegistrationError(f"env '{self.id}': module '{module_name}' has no attribute '{attr}'")
            target = getattr(target, part)
        return target

    def make(self, **kwargs: Any) -> Env:
        """Build the environment with the spec's kwargs overridden by `kwargs`."""
        factory = self.load()
        env = factory(**{**self.kwargs, **kwargs})
        if not isinstance(env, Env):
            raise RegistrationError(
                f"env '{self.id}': entry point returned {type(env).__name__}, which is not a skyrl_gym.Env"
            )
        env.spec = self
        return env


_registry: dict[str, EnvSpec] = {}
registry: Mapping[str, EnvSpec] = MappingProxyType(_registry)


def register(id: str, entry_point: EntryPoint, **kwargs: Any) -> EnvSpec:
    """Register an environment under `id`; `entry_point` is "module:Class" or a callable returning an `Env`.

    `kwargs` become default constructor arguments. Registering an id twice is an error (call `deregister` first).
    """
    if not isinstance(id, str) or not id.strip():
        raise RegistrationError(f"env id must be a non-empty string, got {id!r}")
    if not (callable(entry_point) or isinstance(entry_point, str)):
        raise RegistrationError(f"env '{id}': entry_point must be 'module:Class' or a callable, got {entry_point!r}")
    if id in _registry:
        raise RegistrationError(
            f"env id '{id}' is already registered (entry point {_registry[id].entry_point!r}); "
            "deregister it first or choose another id"
        )
    env_spec = EnvSpec(id, entry_point, dict(kwargs))
    _registry[id] = env_spec
    return env_spec


def deregister(id: str) -> None:
    """Remove a registered id; unknown ids are an error."""
    spec(id)
    del _registry[id]


def spec(id: str) -> EnvSpec:
    """Return the `EnvSpec` of a registered id; an unknown id raises `UnknownEnvError` naming close matches."""
    if id in _registry:
        return _registry[id]
    close = difflib.get_close_matches(str(id), list(_registry), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise UnknownEnvError(
        f"no environment registered as {id!r}.{hint} Registered: {sorted(_registry)}. "
        "Register your own with skyrl_gym.register(id, 'module:Class')."
    )


def make(id: Union[str, EnvSpec], **kwargs: Any) -> Env:
    """Build a registered environment, e.g. `make("gsm8k", env_config={}, extras=row)`."""
    env_spec = id if isinstance(id, EnvSpec) else spec(id)
    return env_spec.make(**kwargs)


def pprint_registry(num_cols: int = 3, print_output: bool = True) -> str:
    """Print (and return) the registered ids as a sorted table of `num_cols` columns."""
    ids = sorted(_registry)
    if not ids:
        text = "(no environments registered)"
    else:
        width = max(len(i) for i in ids) + 2
        rows = [ids[i : i + num_cols] for i in range(0, len(ids), num_cols)]
        text = "\n".join("".join(name.ljust(width) for name in row).rstrip() for row in rows)
    if print_output:
        print(text)
    return text
