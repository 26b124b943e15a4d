"""Name -> function registries for the algorithm library, and shipping user registrations to other processes.

Four registries exist: advantage estimators, policy losses, loss reductions and KL estimators. Built-in entries are
registered when `skyrl_train.algorithms` is imported (importing any submodule imports the package first), so every
process that imports the library has them. Entries a user registers at run time (for example in the driver script)
exist only in that process; to make them callable by name in a Ray worker or a spawned process, export them with
`export_user_registrations()` (bytes, made with cloudpickle) and call `import_user_registrations(blob)` there.

User functions are pickled by value: their code and the module globals they use travel with them, so the receiving
process does not need to be able to import the module that defined them (a test module, a script's `__main__`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from skyrl_train.utils.registry import Registry, RegistryError, dumps_by_value, loads_by_value

F = TypeVar("F", bound=Callable[..., Any])

ADVANTAGE_ESTIMATORS = Registry("advantage estimator", '@register_advantage_estimator("name")')
POLICY_LOSSES = Registry("policy loss", '@register_policy_loss("name")')
LOSS_REDUCTIONS = Registry("loss reduction", '@register_loss_reduction("name")')
KL_ESTIMATORS = Registry("KL estimator", '@register_kl_estimator("name")')

ALL_REGISTRIES: dict[str, Registry] = {
    r.kind: r for r in (ADVANTAGE_ESTIMATORS, POLICY_LOSSES, LOSS_REDUCTIONS, KL_ESTIMATORS)
}


def register_advantage_estimator(name: str, *, overwrite: bool = False) -> Callable[[F], F]:
    """Decorator registering a user advantage estimator (see `skyrl_train.algorithms.advantages` for the signature)."""
    return ADVANTAGE_ESTIMATORS.register(name, overwrite=overwrite)


def register_policy_loss(name: str, *, overwrite: bool = False) -> Callable[[F], F]:
    """Decorator registering a user policy loss (see `skyrl_train.algorithms.policy_losses` for the signature)."""
    return POLICY_LOSSES.register(name, overwrite=overwrite)


def register_loss_reduction(name: str, *, overwrite: bool = False) -> Callable[[F], F]:
    """Decorator registering a user loss reduction (see `skyrl_train.algorithms.reductions` for the signature)."""
    return LOSS_REDUCTIONS.register(name, overwrite=overwrite)


def register_kl_estimator(name: str, *, overwrite: bool = False) -> Callable[[F], F]:
    """Decorator registering a user KL estimator (see `skyrl_train.algorithms.kl` for the signature)."""
    return KL_ESTIMATORS.register(name, overwrite=overwrite)


def export_user_registrations() -> bytes:
    """Cloudpickle the user entries of all four registries into one blob for `import_user_registrations`."""
    return dumps_by_value(
        {kind: {name: reg.get(name) for name in reg.user_names()} for kind, reg in ALL_REGISTRIES.items()}
    )


def import_user_registrations(blob: bytes) -> dict[str, list[str]]:
    """Install a blob from `export_user_registrations` in this process; returns the imported names per registry."""
    payload = loads_by_value(blob)
    unknown = set(payload) - set(ALL_REGISTRIES)
    if unknown:
        raise RegistryError(f"blob names unknown registries {sorted(unknown)}; expected some of {list(ALL_REGISTRIES)}")
    return {kind: ALL_REGISTRIES[kind].install_entries(entries) for kind, entries in payload.items()}
