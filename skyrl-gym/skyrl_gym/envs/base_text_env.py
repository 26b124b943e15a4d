"""`BaseTextEnv`: the chat-message environment every built-in env subclasses, with turn accounting and metrics."""

from __future__ import annotations

import math
import numbers
from typing import Any, ClassVar, Optional, TypedDict

from skyrl_gym.core import Env
from skyrl_gym.errors import EnvOutputError, EnvStateError
from skyrl_gym.tools.core import ToolResult
from skyrl_gym.tools.toolbox import Toolbox

ConversationType = list[dict[str, str]]


class BaseTextEnvStepOutput(TypedDict):
    """What one `BaseTextEnv.step` returns.

    `observations` are chat messages to append after the model's turn (empty when done), `reward` is this turn's
    reward, `postprocessed_action` lets an env rewrite the action text (None keeps the model's text unchanged).
    """

    observations: ConversationType
    reward: float
    done: bool
    metadata: dict[str, Any]
    postprocessed_action: Optional[str]


def final_step(reward: float, metadata: Optional[dict[str, Any]] = None) -> BaseTextEnvStepOutput:
    """The output of a turn that ends the episode with `reward` (no observations follow)."""
    return BaseTextEnvStepOutput(
        observations=[],
        reward=reward,
        done=True,
        metadata={} if metadata is None else metadata,
        postprocessed_action=None,
    )


def reply_step(content: str, metadata: Optional[dict[str, Any]] = None, reward: float = 0.0) -> BaseTextEnvStepOutput:
    """The output of a turn that goes on: the env answers with one user message `content`."""
    return BaseTextEnvStepOutput(
        observations=[{"role": "user", "content": content}],
        reward=reward,
        done=False,
        metadata={} if metadata is None else metadata,
        postprocessed_action=None,
    )


_STEP_KEYS = ("observations", "reward", "done", "metadata", "postprocessed_action")
_STEP_KEY_SET = frozenset(_STEP_KEYS)
_REQUIRED_STEP_KEYS = ("observations", "reward", "done")


_PLAIN_REALS = (float, int, bool)


def _is_real(value: Any) -> bool:
    """Whether `value` is a real number (bools included); the plain types are checked first, since the ABC check of
    `numbers.Real` costs more than a whole step's other checks."""
    return type(value) in _PLAIN_REALS or isinstance(value, numbers.Real)


def check_step_output(output: Any, env_name: str = "env") -> BaseTextEnvStepOutput:
    """Validate a text step output and fill optional keys; raise `EnvOutputError` naming the bad field.

    Required: `observations` (list of {role, content} dicts), `reward` (finite real number), `done` (bool).
    Optional: `metadata` (dict, default {}), `postprocessed_action` (str or None, default None).
    """
    if not isinstance(output, dict):
        raise EnvOutputError(
            f"{env_name}.step returned {type(output).__name__}; expected a dict with keys {_STEP_KEYS}"
        )
    if not _STEP_KEY_SET.issuperset(output):
        unknown = output.keys() - _STEP_KEY_SET
        raise EnvOutputError(f"{env_name}.step returned unknown keys {sorted(unknown)}; allowed keys are {_STEP_KEYS}")
    for key in _REQUIRED_STEP_KEYS:
        if key not in output:
            raise EnvOutputError(f"{env_name}.step output is missing '{key}'")
    observations = output["observations"]
    if not isinstance(observations, list):
        raise EnvOutputError(
            f"{env_name}.step output 'observations' is {type(observations).__name__}; expected a list of messages"
        )
    for index, message in enumerate(observations):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise EnvOutputError(
                f"{env_name}.step output 'observations[{index}]' is {message!r}; expected a dict with a 'role' string"
            )
        if not isinstance(message.get("content"), str):
            raise EnvOutputError(f"{env_name}.step output 'observations[{index}].content' must be a string")
    reward = output["reward"]
    if type(reward) is bool or not _is_real(reward) or not math.isfinite(reward):
        raise EnvOutputError(f"{env_name}.step output 'reward' is {reward!r}; expected a finite number")
    done = output["done"]
    if done is not True and done is not False:
        if type(done).__module__ == "numpy" and type(done).__name__ in ("bool", "bool_"):
            done = bool(done)
        else:
            raise EnvOutputError(f"{env_name}.step output 'done' is {done!r}; expected True or False")
    metadata = output.get("metadata")
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, dict):
        raise EnvOutputError(f"{env_name}.step output 'metadata' is {type(metadata).__name__}; expected a dict")
    action = output.get("postprocessed_action")
    if action is not None and not isinstance(action, str):
        raise EnvOutputError(f"{env_name}.step output 'postprocessed_action' must be a string or None")
    return {
        "observations": observations,
        "reward": float(reward),
        "done": done,
        "metadata": metadata,
        "postprocessed_action": action,
    }


class BaseTextEnv(Env[ConversationType, str]):
    """A text environment working on chat messages.

    Subclasses implement `_step(action) -> BaseTextEnvStepOutput` (and usually `init`). The public `step` counts
    the turn, validates the output, ends the episode once `max_turns` turns were taken (metadata `truncated`), and
    keeps the per-episode tallies behind `get_metrics`. A subclass that needs full control may override `step`.

    A single-turn env (`max_turns == 1`) stepped without `init` starts an implicit episode, as if `init([])` had been
    called (so a subclass's `init` runs with an empty prompt); until `init` is called explicitly, every step is such a
    one-turn episode of its own. A multi-turn env stepped before `init` raises `EnvStateError`.

    Constructor convention: `(env_config, extras)`. `env_config` is the env's section of the run config; `extras` are
    the dataset row's other columns (`reward_spec`, `extra_info`, `data_source`, ...) plus `max_turns` from the
    generator. `max_turns` is read from extras, then env_config, then `default_max_turns`. A subclass that lists its
    env_config keys in `config_keys` gets any other key refused by name (`max_turns` is always allowed).
    """

    default_max_turns: int = 1
    config_keys: ClassVar[Optional[tuple[str, ...]]] = None
    """The env_config keys this env reads (besides `max_turns`); None: the subclass checks its keys itself."""
    episode_tallies: ClassVar[dict[str, Any]] = {}
    """Per-episode tallies by attribute name, with their start values (immutable: numbers, bools): set on the env at
    construction and at every episode start, and reported by `get_metrics` under their own names."""

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        self.env_config: dict[str, Any] = dict(env_config or {})
        self.extras: dict[str, Any] = dict(extras or {})
        if self.config_keys is not None:
            unknown = sorted(set(self.env_config) - set(self.config_keys) - {"max_turns"})
            if unknown:
                raise ValueError(
                    f"{type(self).__name__}: unknown env_config keys {unknown}; allowed: {[*self.config_keys, 'max_turns']}"
                )
        max_turns = self.extras.get("max_turns", self.env_config.get("max_turns", self.default_max_turns))
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"{type(self).__name__}: max_turns must be a positive integer, got {max_turns!r}")
        self.max_turns: int = max_turns
        self.toolbox = Toolbox()
        self.turns = 0
        self.episode_reward = 0.0
        self._reset_episode_tallies()
        self._started = False
        self._implicit = False  # the current episode was started by `step`, not by `init`
        self._done = False
        self._closed = False

    # ----- extras helpers -------------------------------------------------------------------------------------
    @property
    def reward_spec(self) -> dict[str, Any]:
        """The row's `reward_spec` dict (`{method, ground_truth}`); empty when the row had none."""
        spec = self.extras.get("reward_spec") or {}
        if not isinstance(spec, dict):
            raise ValueError(f"{type(self).__name__}: extras['reward_spec'] must be a dict, got {type(spec).__name__}")
        return spec

    def ground_truth(self) -> Any:
        """Return `reward_spec.ground_truth`, raising a clear error when the row has none."""
        spec = self.reward_spec
        if "ground_truth" not in spec:
            raise ValueError(
                f"{type(self).__name__} needs extras['reward_spec']['ground_truth']; the dataset row has "
                f"reward_spec={spec!r}"
            )
        return spec["ground_truth"]

    def config_number(self, key: str, default: float) -> float:
        """`env_config[key]` (else `default`) as a float; ValueError naming `env_config.<key>` unless it is a finite
        number."""
        value = self.env_config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
            raise ValueError(f"env_config.{key} must be a finite number, got {value!r}")
        return float(value)

    @property
    def is_last_turn(self) -> bool:
        """True while handling the final allowed turn (after `step` counted it)."""
        return self.turns >= self.max_turns

    # ----- the episode ----------------------------------------------------------------------------------------
    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start an episode from the prompt messages; return them (possibly rewritten) and an info dict."""
        self._begin_episode()
        return prompt, {}

    def _begin_episode(self) -> None:
        """Reset turn accounting and the `episode_tallies`; subclasses overriding `init` call this (or `super().init`)."""
        if self._closed:
            raise EnvStateError(f"{type(self).__name__}.init called after close()")
        self.turns = 0
        self.episode_reward = 0.0
        self._reset_episode_tallies()
        self._started = True
        self._implicit = False
        self._done = False

    def _reset_episode_tallies(self) -> None:
        for name, start in self.episode_tallies.items():
            setattr(self, name, start)

    def _begin_implicit_episode(self) -> None:
        """Start the episode `step` needs when `init` was not called: only for single-turn envs (see class doc)."""
        name = type(self).__name__
        if self.max_turns != 1:
            raise EnvStateError(
                f"{name}.step called before init(); a multi-turn env (max_turns={self.max_turns}) needs "
                "env.init(prompt) first (only single-turn envs start an episode implicitly)"
            )
        self.init([])
        if not self._started:
            raise EnvStateError(
                f"{name}.init did not start an episode; an init override must call super().init(prompt) or "
                "self._begin_episode()"
            )
        self._implicit = True

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Take one turn: count it, run `_step`, validate the result and apply the `max_turns` limit."""
        name = type(self).__name__
        if self._closed:
            raise EnvStateError(f"{name}.step called after close()")
        if not isinstance(action, str):
            raise TypeError(f"{name}.step expects the model's text as a str, got {type(action).__name__}")
        if not self._started or (self._done and self._implicit):
            self._begin_implicit_episode()
        if self._done:
            raise EnvStateError(f"{name}.step called after the episode ended (done=True); call init() to restart")
        self.turns += 1
        output = check_step_output(self._step(action), name)
        if not output["done"] and self.turns >= self.max_turns:
            output["done"] = True
            output["observations"] = []
            output["metadata"]["truncated"] = True
        self.episode_reward += output["reward"]
        self._done = output["done"]
        return output

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        """One turn of the environment's own logic; subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} must implement _step(action)")

    def close(self) -> None:
        """Close the env's tools and mark it closed. Idempotent."""
        if not self._closed:
            self._closed = True
            self.toolbox.close()

    def query_tool(self, tool: str, query: Optional[str]) -> tuple[Optional[ToolResult], dict[str, Any]]:
        """Call `tool` with `{"query": query}` for a turn that asked it something, and return the result and the
        step metadata (`tool_error` when the call failed); a turn that asked nothing (`query` None) gets no result
        and the metadata `{"no_action": True}`."""
        if query is None:
            return None, {"no_action": True}
        result = self.toolbox.call(tool, {"query": query})
        return result, ({} if result.ok else {"tool_error": result.error})

    # ----- metrics --------------------------------------------------------------------------------------------
    def get_metrics(self) -> dict[str, Any]:
        """Per-episode metrics: `turns`, `episode_reward` and the `episode_tallies`; subclasses may add keys."""
        tallies = {name: getattr(self, name) for name in self.episode_tallies}
        return {"turns": self.turns, "episode_reward": self.episode_reward, **tallies}

    @classmethod
    def aggregate_metrics(cls, metrics: list[dict[str, Any]]) -> dict[str, float]:
        """Combine per-episode metrics: the mean of every numeric or boolean key across the episodes that have it
        (non-finite values left out)."""
        columns: dict[str, list[Any]] = {}
        for episode in metrics:  # one column per key first: the per-value work then runs as comprehensions
            for key, value in episode.items():
                columns.setdefault(key, []).append(value)
        means: dict[str, float] = {}
        for key, values in columns.items():
            finite = [number for number in (float(v) for v in values if _is_real(v)) if math.isfinite(number)]
            if finite:
                means[key] = sum(finite) / len(finite)
        return means
