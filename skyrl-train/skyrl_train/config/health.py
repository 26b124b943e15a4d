"""The `trainer.health` section: per-step checks of PPO training health and what to do when one fails."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skyrl_train.config.root import SkyRLConfig


@dataclass
class HealthConfig:
    """Thresholds of the training-health monitor (`skyrl_train.health`). After every step it compares the step's
    metrics with these; a check that fails `patience` steps in a row raises an alert: a WARNING in the log naming
    the metric, the threshold and this key, a `health/<check>` flag of 1 in the tracker, and with `stop_on_alert`
    a `TrainingHealthError` that ends the run. A check whose metric a run does not produce (e.g. KL without a
    reference model) is skipped; a threshold set to null turns its check off.

    The defaults sit several times beyond the extremes of the CPU quickstart's 450 steps (quoted per field; that run
    never alerted) and beyond what healthy PPO/GRPO runs usually show, so an alert means something is wrong, not
    merely noisy.
    """

    enabled: bool = True
    """Run the checks after every training step (false: no `health/*` metrics, no alerts)."""

    warmup_steps: int = 10
    """Steps observed before any check may alert; their entropies form the entropy reference. The first steps of a
    run are the least typical (learning-rate warm-up, a fresh optimizer); the quickstart warms its learning rate up
    over 10 steps. Counted from the start of this process, so a resumed run warms up again."""

    patience: int = 3
    """Consecutive failing steps before a check alerts. One odd batch is normal in RL (a hard batch, one large
    gradient that clipping absorbs); three in a row is a trend."""

    stop_on_alert: bool = False
    """End the run with `TrainingHealthError` after logging the step on which a check alerted (default: only warn)."""

    max_clip_frac: float | None = 0.3
    """Alert when `policy/clip_frac` (share of tokens where the PPO clip is active) exceeds this. Healthy PPO stays
    around 0.1-0.2 and GRPO with few mini-batches near 0 (the quickstart, 2 mini-batches per step: at most 0.042);
    above 0.3 the updates move the policy far from the one that sampled the batch (learning rate too high, too many
    PPO epochs or mini-batches)."""

    max_kl_to_ref: float | None = 1.0
    """Alert when the per-token KL to the reference model (`policy/kl_to_ref_k3`, else `policy/kl_vs_ref`) exceeds
    this many nats. KL-regularised runs typically stay around 0.01-0.1 (not measured here: the quickstart has no
    reference model); 1 nat per token means the policy has drifted so far
    that the KL term no longer holds it (coefficient too small, learning rate too high, reward hacking). Runs without
    a reference model skip this check."""

    max_logprob_diff: float | None = 0.1
    """Alert when `policy/rollout_train_logprob_abs_diff_mean`, the mean |trainer - engine| log-prob of the sampled
    tokens under the same weights, exceeds this. fp32 on both sides agrees closely (the quickstart: at most 2.9e-7);
    bf16 weights on one side add rounding of the order of a hundredth. 0.1 means the engine samples from another distribution than the trainer scores: a failed or stale
    weight sync, a temperature or chat-template mismatch, or another model."""

    entropy_collapse_ratio: float | None = 0.1
    """Alert when `policy/entropy` falls below this fraction of its reference (its mean over the warm-up steps).
    Entropy falls as a policy learns (the quickstart's fell to 0.48 of its warm-up mean at its lowest); below a
    tenth the policy has nearly stopped exploring and group-relative advantages vanish (learning rate too high, no
    entropy bonus, a degenerate reward)."""

    grad_norm_spike_factor: float | None = 10.0
    """Alert when `policy/grad_norm` exceeds this multiple of the median of the last `grad_norm_window` steps (or is
    NaN/inf). Step-to-step grad norms vary by a factor of 2-3 in healthy runs (the quickstart's largest after the
    warm-up was 2.9 x its running median); ten times the median repeated steps in a row points at a loss blow-up, bad data or a
    learning rate too high. Needs 3 earlier steps."""

    grad_norm_window: int = 20
    """Steps in the running median of `grad_norm_spike_factor`: long enough to ignore single spikes, short enough
    to follow the slow drift of the grad norm over training."""

    reward_drop: float | None = 0.25
    """Alert when the moving average of `reward/mean` (over `reward_window` steps) has fallen this much (in reward
    units) below its best value in the run. With 0/1 rewards that is 25 points of accuracy lost; the quickstart's
    moving average never fell more than 0.094 below its best. Usually a policy collapse after too large updates, or
    an environment or reward function that broke mid-run."""

    reward_window: int = 10
    """Steps in the moving average of `reward_drop`: averages out batch-to-batch noise (the quickstart's mean reward
    of 256 samples moves by 0.07 from one step to the next, standard deviation) while following a collapse within a
    few steps."""

    no_signal_steps: int | None = 10
    """Alert when this many steps in a row had no reward signal (replaces `patience` for this check): with
    `generator.n_samples_per_prompt > 1`, no group of samples with differing rewards (`reward/groups_with_signal`
    is 0, so group-relative advantages are all 0); with one sample per prompt, one reward for the whole batch
    (`reward/std` is 0). The policy then does not learn: tasks too hard or too easy, or a reward that is constant.
    The quickstart never had a step without signal (at least 28 % of its groups had one)."""


_RATIOS = ("entropy_collapse_ratio",)
_POSITIVE = ("max_clip_frac", "max_kl_to_ref", "max_logprob_diff", "reward_drop")
_AT_LEAST_ONE = ("patience", "grad_norm_window", "reward_window", "no_signal_steps")


def check_health(cfg: "SkyRLConfig") -> Iterator[str]:
    """Thresholds positive, the entropy ratio in (0, 1), the spike factor above 1, counts at least 1."""
    health, prefix = cfg.trainer.health, "trainer.health"
    if health.warmup_steps < 0:
        yield f"{prefix}.warmup_steps must be 0 or more, got {health.warmup_steps}"
    for name in _AT_LEAST_ONE:
        value = getattr(health, name)
        if value is not None and value < 1:
            yield f"{prefix}.{name} must be at least 1, got {value}"
    for name in _POSITIVE:
        value = getattr(health, name)
        if value is not None and value <= 0:
            yield f"{prefix}.{name} must be positive (or null to turn the check off), got {value}"
    for name in _RATIOS:
        value = getattr(health, name)
        if value is not None and not 0 < value < 1:
            yield f"{prefix}.{name} is a fraction of the reference entropy and must be in (0, 1), got {value}"
    factor = health.grad_norm_spike_factor
    if factor is not None and factor <= 1:
        yield f"{prefix}.grad_norm_spike_factor must be above 1 (a multiple of the running median), got {factor}"
