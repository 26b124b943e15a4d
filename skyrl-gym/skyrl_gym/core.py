"""The generic environment contract: `Env` with `init`/`step`/`close` and its `EnvStepOutput`."""

from __future__ import annotations

from typing import Any, Generic, TypedDict, TypeVar

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")


class EnvStepOutput(TypedDict):
    """What one `Env.step` returns."""

    observations: Any
    reward: float
    done: bool
    metadata: dict[str, Any]


class Env(Generic[ObsType, ActType]):
    """A Gymnasium-style environment for language models.

    Call `init` once per episode, then `step` until the output says `done`, then `close`. An `Env` is also a context
    manager whose exit calls `close`.
    """

    spec: Any = None  # set by `skyrl_gym.make` to the EnvSpec the environment was built from
    nonblocking: bool = False
    """True when making this env and every call of it (`init`, `step`, `get_metrics`, `close`) is pure computation
    that returns in microseconds: no I/O, no sleeping, no subprocess, no lock another thread may hold. A runner may
    then call it on its own thread (skyrl-train's batched generator does, instead of handing the calls to its env
    thread pool: no thread hop, but also no time limit). Subclasses inherit the flag: one that blocks must set it
    back to False."""

    def init(self, *args: Any, **kwargs: Any) -> tuple[ObsType, dict[str, Any]]:
        """Start an episode; return the first observation and an info dict."""
        raise NotImplementedError(f"{type(self).__name__} must implement init()")

    def step(self, action: ActType) -> EnvStepOutput:
        """Apply one action and return the observation, reward, done flag and metadata."""
        raise NotImplementedError(f"{type(self).__name__} must implement step()")

    def close(self) -> None:
        """Release resources. Safe to call more than once."""

    def __enter__(self) -> Env[ObsType, ActType]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __str__(self) -> str:
        env_id = getattr(self.spec, "id", None)
        return f"<{type(self).__name__}{' id=' + env_id if env_id else ''}>"
