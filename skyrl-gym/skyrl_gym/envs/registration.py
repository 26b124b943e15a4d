"""The environment registry: `register`, `make`, `spec`, `deregister`, `pprint_registry`."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
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
        """Build the environment with the spec's kwargs overridden by `kwargs` (`env_config` as `plain_env_config`
        makes it)."""
        factory = self.load()
        merged = {**self.kwargs, **kwargs}
        if "env_config" in merged:
            merged["env_config"] = plain_env_config(self.id, merged["env_config"])
        env = factory(**merged)
        if not isinstance(env, Env):
            raise RegistrationError(
                f"env '{self.id}': entry point returned {type(env).__name__}, which is not a skyrl_gym.Env"
            )
        env.spec = self
        return env


def _plain(value: Any) -> Any:
    """Nested mappings and sequences (OmegaConf containers included) as plain dicts and lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(item) for item in value]
    return value


def plain_env_config(env_id: str, env_config: Any) -> dict[str, Any]:
    """The env_config an env constructor gets: a plain dict, without the `env_class` selector.

    NovaSky-AI/SkyRL's generator and env code pass `env_config` as an OmegaConf `DictConfig` or a config dataclass
    (its `environment.skyrl_gym.<env>` section), sometimes with the `env_class` that selected the env in it: those
    become a plain dict and the selector is dropped once it is checked to name the env being made. The env validates
    the remaining keys itself.
    """
    if env_config is None:
        return {}
    config = _plain(env_config)
    if not isinstance(config, dict):
        raise TypeError(f"env '{env_id}': env_config must be a mapping, got {type(env_config).__name__}")
    selector = config.pop("env_class", env_id)
    if selector != env_id:
        raise ValueError(f"env '{env_id}': env_config selects env_class {selector!r}, not the env being made")
    return config


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
