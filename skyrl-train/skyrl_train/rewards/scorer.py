"""`RewardScorer`: after generation, give each valid trajectory its final reward from the configured sources.

Sources: the rule reward (the env's step rewards with `reward.manager: env`, else the user function called by the
manager) and the reward model's score. `reward.combine` picks per row:

| combine | `reward_spec.method: reward_model` rows | other rows |
|---|---|---|
| `by_row` | `model_coef * model` | rule |
| `sum` | rule + `model_coef * model` | rule + `model_coef * model` |
| `model` | `model_coef * model` | `model_coef * model` |

A rewritten trajectory keeps the env's per-token rewards when the rule is `env`; otherwise its token rewards are
zeros with the score on the last policy-generated token (where the generator puts a turn's reward). Trajectories the
env already failed (`env_error`) are left alone. A manager call that fails or times out makes its trajectory invalid
the same way an env failure does: `env_error` of kind `reward_error` / `reward_timeout` and rewards zeroed (the
trainer keeps it out of the loss and out of its group's advantage statistics), counted in `reward/manager_errors` /
`reward/manager_timeouts`. `generator.zero_reward_on_non_stop` is applied again to rewritten trajectories.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from collections import defaultdict
from typing import Any, Optional

from skyrl_train.generators.types import GeneratorInput, GeneratorOutput, Trajectory
from skyrl_train.rewards.managers import RewardManager, ScoreOutcome, ScoreRequest, make_reward_manager
from skyrl_train.rewards.model_input import reward_model_token_ids

logger = logging.getLogger(__name__)

MODEL_METHOD = "reward_model"
"""`reward_spec.method` of rows scored by the reward model under `combine: by_row`."""


def last_generated_index(trajectory: Trajectory) -> Optional[int]:
    """Index of the last response token the policy generated (last `loss_mask` 1), else of the last response token
    (e.g. after overlong filtering zeroed the mask); None for an empty response."""
    for index in range(len(trajectory.loss_mask) - 1, -1, -1):
        if trajectory.loss_mask[index]:
            return index
    return len(trajectory.response_ids) - 1 if trajectory.response_ids else None


def row_method(extras: dict[str, Any]) -> str:
    """The row's `reward_spec.method` (`rule` when it has no reward_spec)."""
    spec = extras.get("reward_spec") or {}
    return spec.get("method", "rule") if isinstance(spec, dict) else "rule"


class RewardScorer:
    """Rescores trajectories in place: `await scorer.score(generator_input, output) -> reward/* metrics`.

    `manager` is the rule scorer (None: the env's rewards); `reward_group` is anything with
    `run_sharded("score", ScoringBatch) -> tensor[B]` (a `WorkerGroup` of `RewardModelWorker`s), with
    `rm_tokenizer` the reward model's tokenizer. `tokenizer` is the policy's: responses are decoded with it
    (special tokens skipped) for both the function (`solution_str`) and the reward model.
    """

    def __init__(
        self,
        tokenizer: Any,
        combine: str = "by_row",
        model_coef: float = 1.0,
        manager: Optional[RewardManager] = None,
        reward_group: Optional[Any] = None,
        rm_tokenizer: Optional[Any] = None,
        rm_max_length: int = 4096,
        zero_reward_on_non_stop: bool = False,
    ) -> None:
        if combine not in ("by_row", "sum", "model"):
            raise ValueError(f"reward.combine must be by_row, sum or model, got {combine!r}")
        if (reward_group is None) != (rm_tokenizer is None):
            raise ValueError("RewardScorer needs both reward_group and rm_tokenizer for a reward model, or neither")
        if combine != "by_row" and reward_group is None:
            raise ValueError(f"reward.combine={combine} needs a reward model (reward.model.path)")
        self.tokenizer, self.combine, self.model_coef = tokenizer, combine, model_coef
        self.manager, self.reward_group, self.rm_tokenizer = manager, reward_group, rm_tokenizer
        self.rm_max_length, self.zero_reward_on_non_stop = rm_max_length, zero_reward_on_non_stop

    @classmethod
    def from_config(cls, cfg: Any, tokenizer: Any, reward_group: Optional[Any] = None) -> RewardScorer:
        """The scorer for `cfg.reward`; `reward_group` is the reward-model group when `reward.model.path` is set."""
        from skyrl_train.models.loading import load_tokenizer

        reward = cfg.reward
        rm_tokenizer = load_tokenizer(reward.model.path) if reward_group is not None else None
        return cls(
            tokenizer,
            combine=reward.combine,
            model_coef=reward.model_coef,
            manager=make_reward_manager(reward),
            reward_group=reward_group,
            rm_tokenizer=rm_tokenizer,
            rm_max_length=reward.model.max_length,
            zero_reward_on_non_stop=cfg.generator.zero_reward_on_non_stop,
        )

    def _plan(self, method: str) -> tuple[bool, bool]:
        """(uses the rule reward, uses the model score) for a row with `reward_spec.method` = `method`."""
        if self.combine == "sum":
            return True, True
        if self.combine == "model":
            return False, True
        is_model_row = method == MODEL_METHOD
        if is_model_row and self.reward_group is None:
            raise ValueError(
                "a row has reward_spec.method=reward_model but no reward model is configured: set reward.model.path"
            )
        return not is_model_row, is_model_row

    async def score(self, generator_input: GeneratorInput, output: GeneratorOutput) -> dict[str, float]:
        """Rewrite each valid trajectory's `token_rewards` (and mark failed scorings invalid); returns `reward/*`."""
        trajectories = output.trajectories
        if len(trajectories) != len(generator_input.prompts):
            raise ValueError(
                f"RewardScorer needs one trajectory per prompt row ({len(generator_input.prompts)}), got "
                f"{len(trajectories)}: step-wise trajectories are not supported with reward managers or a reward model"
            )
        rows = [i for i, t in enumerate(trajectories) if t.is_valid]
        plans = {i: self._plan(row_method(generator_input.env_extras[i])) for i in rows}
        rule_rows = [i for i in rows if plans[i][0] and self.manager is not None]
        model_rows = [i for i in rows if plans[i][1]]
        if not rule_rows and not model_rows:
            return self._metrics({}, {}, 0)
        responses = {i: self.tokenizer.decode(trajectories[i].response_ids, skip_special_tokens=True) for i in rows}
        outcomes, (model_scores, truncated) = await asyncio.gather(
            self._rule_scores(rule_rows, generator_input, trajectories, responses),
            self._model_scores(model_rows, generator_input, responses),
        )
        for i in sorted(set(rule_rows) | set(model_rows)):
            self._rewrite(trajectories[i], plans[i], outcomes.get(i), model_scores.get(i))
        return self._metrics(outcomes, model_scores, truncated)

    async def _rule_scores(self, rows, generator_input, trajectories, responses) -> dict[int, ScoreOutcome]:
        if not rows:
            return {}
        requests = []
        for i in rows:
            extras = generator_input.env_extras[i]
            spec = extras.get("reward_spec") or {}
            requests.append(
                ScoreRequest(
                    data_source=trajectories[i].data_source or extras.get("data_source") or "unknown",
                    solution_str=responses[i],
                    ground_truth=spec.get("ground_truth") if isinstance(spec, dict) else None,
                    extra_info=extras.get("extra_info"),
                )
            )
        outcomes = await asyncio.to_thread(self.manager.score, requests)
        return dict(zip(rows, outcomes))

    async def _model_scores(self, rows, generator_input, responses) -> tuple[dict[int, float], int]:
        if not rows:
            return {}, 0
        from skyrl_train.workers.reward_worker import ScoringBatch

        token_ids, truncated = [], 0
        for i in rows:
            ids, cut = reward_model_token_ids(
                self.rm_tokenizer, generator_input.prompts[i], responses[i], self.rm_max_length
            )
            token_ids.append(ids)
            truncated += cut
        scores = await asyncio.to_thread(self.reward_group.run_sharded, "score", ScoringBatch(token_ids))
        return {i: float(score) for i, score in zip(rows, scores.tolist())}, truncated

    def _rewrite(self, trajectory, plan, outcome: Optional[ScoreOutcome], model_score: Optional[float]) -> None:
        uses_rule, uses_model = plan
        if outcome is not None and outcome.status != "ok":
            trajectory.env_error = {"kind": f"reward_{outcome.status}", "reason": outcome.reason}
            trajectory.token_rewards = [0.0] * len(trajectory.token_rewards)
            return
        keep_env = uses_rule and self.manager is None
        rewards = list(trajectory.token_rewards) if keep_env else [0.0] * len(trajectory.token_rewards)
        added = (outcome.score if outcome is not None else 0.0) + (self.model_coef * model_score if uses_model else 0.0)
        index = last_generated_index(trajectory)
        if index is not None:
            rewards[index] += added
        if self.zero_reward_on_non_stop and trajectory.stop_reason != "stop":
            rewards = [0.0] * len(rewards)
        trajectory.token_rewards = rewards

    def _metrics(self, outcomes: dict[int, ScoreOutcome], model_scores: dict[int, float], truncated: int):
        metrics: dict[str, float] = {}
        if self.manager is not None:
            ok = [o.score for o in outcomes.values() if o.status == "ok"]
            failed = [o for o in outcomes.values() if o.status != "ok"]
            metrics["reward/manager_scored"] = float(len(ok))
            metrics["reward/manager_errors"] = float(sum(o.status == "error" for o in failed))
            metrics["reward/manager_timeouts"] = float(sum(o.status == "timeout" for o in failed))
            if ok:
                metrics["reward/rule_score_mean"] = statistics.fmean(ok)
            extras: dict[str, list[float]] = defaultdict(list)
            for outcome in outcomes.values():
                for key, value in outcome.extras.items():
                    extras[key].append(value)
            metrics.update({f"reward/function/{key}": statistics.fmean(values) for key, values in extras.items()})
            if failed:
                logger.warning(
                    "reward.function failed on %d of %d responses (%d timed out); these trajectories are not "
                    "trained on. First failure: %s",
                    len(failed),
                    len(outcomes),
                    int(metrics["reward/manager_timeouts"]),
                    failed[0].reason,
                )
        if self.reward_group is not None:
            scores = list(model_scores.values())
            metrics["reward/model_scored"] = float(len(scores))
            metrics["reward/model_truncated"] = float(truncated)
            if scores:
                metrics["reward/model_score_mean"] = statistics.fmean(scores)
                metrics["reward/model_score_std"] = statistics.pstdev(scores)
        return metrics

    def close(self) -> None:
        """Stop the manager's processes, if any (the reward-model group is shut down by its owner)."""
        if self.manager is not None:
            self.manager.close()
