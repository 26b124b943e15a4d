"""Training-health monitor: per-step checks of a PPO-family run's metrics that warn, flag and optionally stop.

`HealthMonitor.observe(step, metrics)` runs after every training step on the step's metrics dict and returns
`health/*` metrics for the tracker: `health/<check>` (1 while the check alerts, 0 otherwise; only for checks whose
metric the step has) and `health/alerts` (how many checks alert). A check alerts once its condition held for
`patience` consecutive steps after the warm-up; the first alerting step logs a WARNING naming the check, the
metric's value, the threshold, the config key that sets it and the usual causes. `raise_if_stopping()` then raises
`TrainingHealthError` with the same text when `trainer.health.stop_on_alert` is set; the trainer calls it after the
step's metrics were logged, so the alert reaches the tracker before the run ends.

Checks (thresholds in `trainer.health`, see `skyrl_train.config.health.HealthConfig`):

| check | metric | fails when |
|---|---|---|
| `clip_frac` | `policy/clip_frac` | above `max_clip_frac` |
| `kl_to_ref` | `policy/kl_to_ref_k3` (else `policy/kl_vs_ref`) | above `max_kl_to_ref` |
| `logprob_diff` | `policy/rollout_train_logprob_abs_diff_mean` | above `max_logprob_diff` |
| `entropy_collapse` | `policy/entropy` | below `entropy_collapse_ratio` x its warm-up mean |
| `grad_norm_spike` | `policy/grad_norm` | above `grad_norm_spike_factor` x the median of the last `grad_norm_window` steps |
| `reward_collapse` | `reward/mean` | its `reward_window`-step moving average `reward_drop` below its best |
| `no_reward_signal` | `reward/groups_with_signal` (one sample per prompt: `reward/std`) | 0 for `no_signal_steps` steps |

A NaN or infinite value fails its check. The monitor keeps its state in memory only: after a resume the warm-up
and the baselines start again.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from skyrl_train.config.health import HealthConfig

logger = logging.getLogger(__name__)

KEY_PREFIX = "trainer.health"
"""Config section of the thresholds, as named in messages."""

MIN_GRAD_NORM_HISTORY = 3
"""Earlier grad norms the spike check needs before its median means anything."""


class TrainingHealthError(RuntimeError):
    """A health check alerted and `trainer.health.stop_on_alert` is set; `alerts` holds what failed."""

    def __init__(self, step: int, alerts: list[Alert]) -> None:
        self.step, self.alerts = step, list(alerts)
        lines = [f"training stopped at step {step}: {len(alerts)} health check(s) alerted"]
        lines += [f"  - {alert.message}" for alert in alerts]
        lines.append(f"(set {KEY_PREFIX}.stop_on_alert=false to only warn, or change the thresholds named above)")
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class Alert:
    """One check that alerted on one step: what was measured against what, and the text logged for it."""

    check: str
    step: int
    metric: str
    value: float
    limit: float
    config_key: str
    message: str


@dataclass(frozen=True)
class Finding:
    """A check's verdict on one step: `failed`, the metric it read and its value, and the limit it used."""

    failed: bool
    metric: str
    value: float
    limit: float
    detail: str
    """What the value is compared with, e.g. `> 0.3` or `< 0.1 x reference 2.1 = 0.21`; shown after the value."""


@dataclass
class Check:
    """One named check of the first of `metrics` a step has: `judge(metric, value) -> Finding | None` (None: no
    baseline yet)."""

    name: str
    config_key: str
    causes: str
    metrics: tuple[str, ...]
    judge: Callable[[str, float], Optional[Finding]]
    patience: int
    streak: int = 0
    alerting: bool = False


def _value(metrics: Mapping[str, float], *names: str) -> Optional[tuple[str, float]]:
    for name in names:
        if name in metrics and metrics[name] is not None:
            return name, float(metrics[name])
    return None


def _above(limit: float) -> Callable[[str, float], Finding]:
    """A judge that fails a value above `limit`."""
    return lambda name, value: Finding(not value <= limit, name, value, limit, f"> {limit:.4g}")


@dataclass
class _Baselines:
    """Running state of the relative checks."""

    entropy_warmup: list[float] = field(default_factory=list)
    entropy_reference: Optional[float] = None
    grad_norms: deque = field(default_factory=deque)
    rewards: deque = field(default_factory=deque)
    best_reward_average: Optional[float] = None


class HealthMonitor:
    """Per-step health checks of a training run, configured by `trainer.health` (see the module docstring).

    `group_size` is `generator.n_samples_per_prompt`: it decides whether "no reward signal" reads
    `reward/groups_with_signal` (groups of several samples) or `reward/std` (one sample per prompt).
    """

    def __init__(self, config: HealthConfig, group_size: int = 1) -> None:
        self.config = config
        self.group_size = group_size
        self.observed = 0
        self.pending: list[Alert] = []
        self.last_step = 0
        self._state = _Baselines(
            grad_norms=deque(maxlen=config.grad_norm_window), rewards=deque(maxlen=config.reward_window)
        )
        self.checks = self._build_checks() if config.enabled else []

    @classmethod
    def from_config(cls, cfg: Any) -> HealthMonitor:
        """The monitor a `SkyRLConfig` asks for (`trainer.health`, `generator.n_samples_per_prompt`)."""
        return cls(cfg.trainer.health, group_size=cfg.generator.n_samples_per_prompt)

    # ----- the checks ---------------------------------------------------------------------------------------------
    def _build_checks(self) -> list[Check]:
        """The checks whose threshold is set: each row names the check, its `trainer.health` field, the metric it
        reads (the first of these a step has), how it judges the value, its patience and the usual causes."""
        c = self.config
        table: list[tuple[str, str, tuple[str, ...], Callable[[str, float], Optional[Finding]], int, str]] = [
            (
                "clip_frac",
                "max_clip_frac",
                ("policy/clip_frac",),
                _above(c.max_clip_frac),
                c.patience,
                "the policy moves too far within a step: learning rate too high, or too many PPO epochs or "
                "mini-batches per batch",
            ),
            (
                "kl_to_ref",
                "max_kl_to_ref",
                ("policy/kl_to_ref_k3", "policy/kl_vs_ref"),
                _above(c.max_kl_to_ref),
                c.patience,
                "the policy drifted far from the reference model: KL coefficient too small, learning rate too "
                "high, or the policy found a way to game the reward",
            ),
            (
                "logprob_diff",
                "max_logprob_diff",
                ("policy/rollout_train_logprob_abs_diff_mean",),
                _above(c.max_logprob_diff),
                c.patience,
                "the engine samples from another distribution than the trainer scores: a failed or stale weight "
                "sync, a temperature or chat-template mismatch, low-precision engine weights, or another model; "
                "in the async modes the data is up to max_staleness versions old, and that policy drift adds to "
                "the difference (lower trainer.async_rl.max_staleness or raise the threshold)",
            ),
            (
                "entropy_collapse",
                "entropy_collapse_ratio",
                ("policy/entropy",),
                self._entropy,
                c.patience,
                "the policy stopped exploring (near-deterministic samples, so group advantages vanish): learning "
                "rate too high, no entropy bonus, or a degenerate reward",
            ),
            (
                "grad_norm_spike",
                "grad_norm_spike_factor",
                ("policy/grad_norm",),
                self._grad_norm,
                c.patience,
                "the loss is blowing up: learning rate too high, extreme advantages or log-prob ratios, or "
                "malformed data in the batch",
            ),
            (
                "reward_collapse",
                "reward_drop",
                ("reward/mean",),
                self._reward,
                c.patience,
                "the policy collapsed after too large updates, or the environment / reward function broke mid-run",
            ),
            (
                "no_reward_signal",
                "no_signal_steps",
                ("reward/groups_with_signal",) if self.group_size > 1 else ("reward/std",),
                self._signal,
                c.no_signal_steps,
                "every sample of a prompt gets the same reward, so advantages are 0 and the policy does not "
                "learn: tasks too hard or too easy for the model, or a constant reward",
            ),
        ]
        return [
            Check(name, f"{KEY_PREFIX}.{field}", causes, metrics, judge, patience)
            for name, field, metrics, judge, patience, causes in table
            if getattr(c, field) is not None
        ]

    def _entropy(self, name: str, value: float) -> Optional[Finding]:
        state, ratio = self._state, self.config.entropy_collapse_ratio
        if state.entropy_reference is None:
            if math.isfinite(value):
                state.entropy_warmup.append(value)
            if self.observed < self.config.warmup_steps or not state.entropy_warmup:
                return None
            state.entropy_reference = statistics.fmean(state.entropy_warmup)
        limit = ratio * state.entropy_reference
        detail = f"< {ratio:g} x reference {state.entropy_reference:.4g} = {limit:.4g}"
        return Finding(not value >= limit, name, value, limit, detail)

    def _grad_norm(self, name: str, value: float) -> Optional[Finding]:
        history, factor = self._state.grad_norms, self.config.grad_norm_spike_factor
        finding = None
        if not math.isfinite(value):
            finding = Finding(True, name, value, math.nan, "is not finite")
        elif len(history) >= MIN_GRAD_NORM_HISTORY:
            median = statistics.median(history)
            limit = factor * median
            detail = f"> {factor:g} x median {median:.4g} = {limit:.4g}"
            finding = Finding(not value <= limit, name, value, limit, detail)
        if math.isfinite(value):
            history.append(value)
        return finding

    def _reward(self, name: str, value: float) -> Optional[Finding]:
        state, drop = self._state, self.config.reward_drop
        if not math.isfinite(value):
            return Finding(True, name, value, math.nan, "is not finite")
        state.rewards.append(value)
        if len(state.rewards) < state.rewards.maxlen:
            return None
        average = statistics.fmean(state.rewards)
        best = average if state.best_reward_average is None else max(state.best_reward_average, average)
        state.best_reward_average = best
        limit = best - drop
        label = f"{state.rewards.maxlen}-step average {name}"
        return Finding(average < limit, label, average, limit, f"< best {best:.4g} - {drop:g} = {limit:.4g}")

    def _signal(self, name: str, value: float) -> Optional[Finding]:
        detail = "(no group of samples with differing rewards)" if self.group_size > 1 else "(one reward for all)"
        return Finding(not value > 0, name, value, 0.0, detail)

    # ----- per step -----------------------------------------------------------------------------------------------
    def observe(self, step: int, metrics: Mapping[str, float]) -> dict[str, float]:
        """Run every check on one step's metrics; returns `health/*` metrics and logs a WARNING per new alert."""
        if not self.config.enabled:
            return {}
        self.observed += 1
        self.last_step = step
        warmed_up = self.observed > self.config.warmup_steps
        out: dict[str, float] = {}
        alerts: list[Alert] = []
        for check in self.checks:
            found = _value(metrics, *check.metrics)
            finding = None if found is None else check.judge(*found)
            if finding is None:  # metric absent or no baseline yet: the step breaks a streak of failures
                check.streak, check.alerting = 0, False
                continue
            check.streak = check.streak + 1 if finding.failed and warmed_up else 0
            was_alerting, check.alerting = check.alerting, check.streak >= check.patience
            out[f"health/{check.name}"] = float(check.alerting)
            if check.alerting:
                alert = self._alert(check, finding, step)
                alerts.append(alert)
                if not was_alerting:
                    logger.warning("%s", alert.message)
            elif was_alerting:
                logger.info(
                    "health check %r recovered at step %d (%s = %.4g)", check.name, step, finding.metric, finding.value
                )
        out["health/alerts"] = float(len(alerts))
        self.pending = alerts if self.config.stop_on_alert else []
        return out

    def _alert(self, check: Check, finding: Finding, step: int) -> Alert:
        steps = f"{check.streak} consecutive steps" if check.streak > 1 else "1 step"
        message = (
            f"health check {check.name!r} alerted at step {step} (failing for {steps}): {finding.metric} = "
            f"{finding.value:.4g} {finding.detail}, set by {check.config_key}. "
            f"Usual causes: {check.causes}."
        )
        return Alert(check.name, step, finding.metric, finding.value, finding.limit, check.config_key, message)

    def raise_if_stopping(self) -> None:
        """Raise `TrainingHealthError` if the last observed step alerted and `stop_on_alert` is set."""
        if self.pending:
            raise TrainingHealthError(self.last_step, self.pending)
