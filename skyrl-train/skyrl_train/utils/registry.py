"""`Registry`: a name -> callable table with close-match errors, used by every registry of skyrl_train.

Algorithm components (`skyrl_train.algorithms.registry`), engine backends, weight-sync strategies and process-group
backends are each one `Registry`. Built-in entries are marked `builtin=True`; the rest are user registrations, which
`export_entries` / `import_entries` ship to another process (cloudpickled by value, so the receiving process need
not be able to import the module that defined them).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import cloudpickle

F = TypeVar("F", bound=Callable[..., Any])

_BLOB_FORMAT = "skyrl_train.registry/v1"


class RegistryError(Exception):
    """A name was registered twice, a name or function is invalid, or an exported blob cannot be imported."""


class UnknownNameError(RegistryError, KeyError):
    """`Registry.get` was asked for a name that is not registered."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class Registry:
    """A name -> callable table for one kind of component (e.g. "policy loss", "engine backend").

    Register with the `register(name)` decorator, look up with `get(name)`. Built-in entries are marked with
    `builtin=True`; everything else counts as a user registration and is what `export_entries` ships.
    """

    def __init__(self, kind: str, decorator_hint: str) -> None:
        self.kind = kind
        self._decorator_hint = decorator_hint
        self._entries: dict[str, Callable[..., Any]] = {}
        self._builtin: set[str] = set()

    def register(self, name: str, *, builtin: bool = False, overwrite: bool = False) -> Callable[[F], F]:
        """Decorator registering the decorated function under `name`; returns the function unchanged."""

        def decorator(fn: F) -> F:
            self.add(name, fn, builtin=builtin, overwrite=overwrite)
            return fn

        return decorator

    def add(self, name: str, fn: Callable[..., Any], *, builtin: bool = False, overwrite: bool = False) -> None:
        """Register `fn` under `name`. A taken name is an error unless `overwrite=True`."""
        if not isinstance(name, str) or not name.strip():
            raise RegistryError(f"{self.kind} name must be a non-empty string, got {name!r}")
        if not callable(fn):
            raise RegistryError(f"{self.kind} '{name}': expected a callable, got {type(fn).__name__}")
        if name in self._entries and not overwrite:
            raise RegistryError(
                f"{self.kind} '{name}' is already registered (by {_describe(self._entries[name])}); "
                "choose another name or pass overwrite=True"
            )
        self._entries[name] = fn
        if builtin:
            self._builtin.add(name)
        else:
            self._builtin.discard(name)

    def unregister(self, name: str) -> None:
        """Remove a registered name; an unknown name is an error."""
        self.get(name)
        del self._entries[name]
        self._builtin.discard(name)

    def get(self, name: str) -> Callable[..., Any]:
        """Return the function registered as `name`; an unknown name raises `UnknownNameError` listing the options."""
        if name in self._entries:
            return self._entries[name]
        close = difflib.get_close_matches(str(name), list(self._entries), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownNameError(
            f"unknown {self.kind} {name!r}.{hint} Registered: {self.names()}. "
            f"Register your own with {self._decorator_hint}."
        )

    def names(self) -> list[str]:
        """Sorted registered names."""
        return sorted(self._entries)

    def user_names(self) -> list[str]:
        """Sorted names registered by users (not built in); these are what `export_entries` ships."""
        return sorted(set(self._entries) - self._builtin)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"

    def export_entries(self) -> bytes:
        """Cloudpickle the user-registered functions (by value) into bytes for `import_entries` elsewhere."""
        return dumps_by_value({self.kind: {name: self._entries[name] for name in self.user_names()}})

    def import_entries(self, blob: bytes) -> list[str]:
        """Register the functions of a blob made by `export_entries` of the same kind; returns their names.

        Imported entries replace same-named ones here: the exporting process is the source of truth.
        """
        payload = loads_by_value(blob)
        unexpected = set(payload) - {self.kind}
        if unexpected:
            raise RegistryError(f"blob holds {sorted(unexpected)} entries, but this registry is for {self.kind!r}")
        return self.install_entries(payload.get(self.kind, {}))

    def install_entries(self, entries: dict[str, Callable[..., Any]]) -> list[str]:
        """Register `entries` (name -> fn) as user entries, replacing same-named ones; returns their sorted names."""
        for name, fn in entries.items():
            self.add(name, fn, overwrite=True)
        return sorted(entries)


def _describe(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def dumps_by_value(payload: dict[str, dict[str, Callable[..., Any]]]) -> bytes:
    """Pickle `{kind: {name: fn}}` entries, with every user function's defining module registered for pickling by value."""
    module_names = {getattr(fn, "__module__", None) for entries in payload.values() for fn in entries.values()}
    already = set(cloudpickle.list_registry_pickle_by_value())
    added = []
    for module_name in sorted(n for n in module_names if n and n != "__main__" and n not in already):
        module = sys.modules.get(module_name)
        if module is not None and not module_name.startswith("skyrl_train."):
            cloudpickle.register_pickle_by_value(module)
            added.append(module)
    try:
        return cloudpickle.dumps({"format": _BLOB_FORMAT, "entries": payload})
    finally:
        for module in added:
            cloudpickle.unregister_pickle_by_value(module)


def loads_by_value(blob: bytes) -> dict[str, dict[str, Callable[..., Any]]]:
    """The `{kind: {name: fn}}` entries of a blob made by `dumps_by_value`; a foreign or broken blob raises."""
    if not isinstance(blob, bytes | bytearray):
        raise RegistryError(f"expected the bytes made by export_entries/export_user_registrations, got {type(blob)}")
    try:
        data = cloudpickle.loads(blob)
    except Exception as exc:
        raise RegistryError(f"cannot unpickle registry blob: {type(exc).__name__}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != _BLOB_FORMAT:
        raise RegistryError(f"blob is not a registry export (expected format {_BLOB_FORMAT!r})")
    return data["entries"]
