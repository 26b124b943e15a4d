"""Reward managers (verl's names): how a user scoring function is called on a batch of responses.

| manager | calls | time limit |
|---|---|---|
| `naive` | `fn(data_source=, solution_str=, ground_truth=, extra_info=)` per response, in this process | none |
| `batch` | `fn(data_sources=, solution_strs=, ground_truths=, extra_infos=)` once, lists in, list out | none |
| `parallel` | the per-response call in `num_workers` processes (`ScoringProcessPool`) | `timeout_s` per call |

Every manager returns one `ScoreOutcome` per request: `ok` with a finite score, or `error` / `timeout` with the
reason. The caller decides what a failed outcome does to its trajectory (the `RewardScorer` marks it invalid).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Optional

from skyrl_train.rewards.functions import RewardFunctionError, load_reward_function, parse_score
from skyrl_train.rewards.process_pool import ScoringProcessPool


@dataclass
class ScoreRequest:
    """One response to score, with the row's fields the function receives (verl's argument names)."""

    data_source: str
    solution_str: str
    ground_truth: Any = None
    extra_info: Any = None


@dataclass
class ScoreOutcome:
    """The result of scoring one request: `score` when `status == "ok"`, else the failure's `reason`."""

    status: Literal["ok", "error", "timeout"]
    score: Optional[float] = None
    reason: str = ""
    extras: dict[str, float] = field(default_factory=dict)
    """Other numeric entries of a dict result (logged as `reward/function/<key>`)."""

    @classmethod
    def from_result(cls, result: Any) -> ScoreOutcome:
        """`ok` with the parsed score, or `error` saying what the function returned."""
        try:
            score, extras = parse_score(result)
        except RewardFunctionError as exc:
            return cls("error", reason=str(exc))
        return cls("ok", score=score, extras=extras)


class RewardManager:
    """Calls a user scoring function on requests; subclasses implement `score`."""

    name = ""

    def score(self, requests: list[ScoreRequest]) -> list[ScoreOutcome]:
        """One outcome per request, in order."""
        raise NotImplementedError

    def close(self) -> None:
        """Release processes or other resources (nothing by default)."""


class NaiveRewardManager(RewardManager):
    """One in-process call per response; an exception is that response's `error` outcome."""

    name = "naive"

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function

    def score(self, requests: list[ScoreRequest]) -> list[ScoreOutcome]:
        """Call the function on each request in turn."""
        outcomes = []
        for request in requests:
            try:
                result = self.function(**asdict(request))
            except Exception as exc:
                outcomes.append(ScoreOutcome("error", reason=f"{type(exc).__name__}: {exc}"))
                continue
            outcomes.append(ScoreOutcome.from_result(result))
        return outcomes


class BatchRewardManager(RewardManager):
    """One in-process call with the whole batch as lists. An exception fails every request of the call; a result
    that is not a list of one entry per request raises RewardFunctionError (results cannot be matched to rows)."""

    name = "batch"

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function

    def score(self, requests: list[ScoreRequest]) -> list[ScoreOutcome]:
        """Call the function once with the requests' fields as lists."""
        if not requests:
            return []
        try:
            results = self.function(
                data_sources=[r.data_source for r in requests],
                solution_strs=[r.solution_str for r in requests],
                ground_truths=[r.ground_truth for r in requests],
                extra_infos=[r.extra_info for r in requests],
            )
        except Exception as exc:
            return [ScoreOutcome("error", reason=f"{type(exc).__name__}: {exc}") for _ in requests]
        if isinstance(results, (str, bytes)) or not hasattr(results, "__len__") or len(results) != len(requests):
            got = f"{len(results)} results" if hasattr(results, "__len__") else type(results).__name__
            raise RewardFunctionError(
                f"reward.manager=batch: the function must return a list with one score per response; it got "
                f"{len(requests)} responses and returned {got}"
            )
        return [ScoreOutcome.from_result(result) for result in results]


class ParallelRewardManager(RewardManager):
    """Per-response calls in a `ScoringProcessPool` of `num_workers` processes, each call limited to `timeout_s`."""

    name = "parallel"

    def __init__(self, spec: str, num_workers: int, timeout_s: float) -> None:
        self.pool = ScoringProcessPool(spec, num_workers, timeout_s)

    def score(self, requests: list[ScoreRequest]) -> list[ScoreOutcome]:
        """Score the requests in the pool; timed-out calls are `timeout` outcomes."""
        if not requests:
            return []
        outcomes = []
        for result in self.pool.map([asdict(request) for request in requests]):
            if result.ok:
                outcomes.append(ScoreOutcome.from_result(result.value))
            else:
                outcomes.append(ScoreOutcome("timeout" if result.kind == "timeout" else "error", reason=result.reason))
        return outcomes

    def close(self) -> None:
        """Stop the scoring processes."""
        self.pool.close()


def make_reward_manager(reward_cfg: Any) -> Optional[RewardManager]:
    """The manager `reward.manager` names (None for `env`: the environment's rewards are kept)."""
    name = reward_cfg.manager
    if name == "env":
        return None
    if name not in REWARD_MANAGERS:
        raise ValueError(f"reward.manager must be one of {['env', *REWARD_MANAGERS]}, got {name!r}")
    if not reward_cfg.function:
        raise ValueError(f"reward.manager={name} needs reward.function")
    return REWARD_MANAGERS[name](reward_cfg)


REWARD_MANAGERS: dict[str, Callable[[Any], RewardManager]] = {
    "naive": lambda cfg: NaiveRewardManager(load_reward_function(cfg.function)),
    "batch": lambda cfg: BatchRewardManager(load_reward_function(cfg.function)),
    "parallel": lambda cfg: ParallelRewardManager(cfg.function, cfg.num_workers, cfg.timeout_s),
}
"""Builder of each manager from the `reward` config section."""
