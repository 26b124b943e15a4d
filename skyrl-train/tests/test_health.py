"""HealthMonitor on hand-built metric sequences: each check fires when it should, not during the warm-up or before
`patience`, not on healthy runs; every `trainer.health` key changes what happens; stopping names the key."""

import logging
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from skyrl_train.config import HealthConfig, SkyRLConfig
from skyrl_train.health import HealthMonitor, TrainingHealthError

CHECKS = (
    "clip_frac",
    "kl_to_ref",
    "logprob_diff",
    "entropy_collapse",
    "grad_norm_spike",
    "reward_collapse",
    "no_reward_signal",
)


def healthy(step: int, rng: random.Random) -> dict[str, float]:
    """A step of a healthy GRPO run with a reference model: noisy, slowly drifting values inside every limit."""
    return {
        "policy/clip_frac": 0.02 + 0.02 * rng.random(),
        "policy/kl_to_ref_k3": 0.001 * step,
        "policy/rollout_train_logprob_abs_diff_mean": 0.01 * rng.random(),
        "policy/entropy": 1.0 * math.exp(-step / 200) * (0.9 + 0.2 * rng.random()),
        "policy/grad_norm": 0.5 * (0.5 + 1.5 * rng.random()),
        "reward/mean": min(0.9, 0.2 + 0.003 * step) + 0.06 * (rng.random() - 0.5),
        "reward/std": 0.4,
        "reward/groups_with_signal": 0.3 + 0.4 * rng.random(),
    }


def run(config: HealthConfig, sequence, group_size: int = 8):
    """Observe `sequence` (list of metric dicts); returns the monitor and the health metrics of every step."""
    monitor = HealthMonitor(config, group_size=group_size)
    return monitor, [monitor.observe(step, metrics) for step, metrics in enumerate(sequence, start=1)]


def alert_steps(outputs, check: str) -> list[int]:
    return [step for step, out in enumerate(outputs, start=1) if out.get(f"health/{check}") == 1.0]


def healthy_run(steps: int, seed: int = 0) -> list[dict[str, float]]:
    rng = random.Random(seed)
    return [healthy(step, rng) for step in range(1, steps + 1)]


def with_values(sequence, start: int, **values: float) -> list[dict[str, float]]:
    """The sequence with `values` (metric name with `/` written as `__`) from step `start` on (1-based)."""
    changed = [dict(metrics) for metrics in sequence]
    for metrics in changed[start - 1 :]:
        metrics.update({name.replace("__", "/"): value for name, value in values.items()})
    return changed


def test_a_healthy_run_never_alerts_with_the_defaults():
    monitor, outputs = run(HealthConfig(), healthy_run(300))
    assert all(out["health/alerts"] == 0.0 for out in outputs)
    assert {f"health/{check}" for check in CHECKS} <= set(outputs[-1])
    monitor.raise_if_stopping()  # nothing pending


# (check, failing metric values from step 1 on, and the key whose null turns the check off)
FAILING = [
    ("clip_frac", {"policy__clip_frac": 0.5}, "max_clip_frac"),
    ("kl_to_ref", {"policy__kl_to_ref_k3": 2.0}, "max_kl_to_ref"),
    ("logprob_diff", {"policy__rollout_train_logprob_abs_diff_mean": 0.5}, "max_logprob_diff"),
    ("grad_norm_spike", {"policy__grad_norm": math.nan}, "grad_norm_spike_factor"),
    ("reward_collapse", {"reward__mean": math.inf}, "reward_drop"),
]


@pytest.mark.parametrize("warmup, patience", [(4, 3), (0, 3), (4, 1), (9, 5)])
@pytest.mark.parametrize("check, values, key", FAILING)
def test_a_failing_check_alerts_after_warmup_plus_patience_steps(check, values, key, warmup, patience):
    config = HealthConfig(warmup_steps=warmup, patience=patience)
    sequence = with_values(healthy_run(20), 1, **values)
    _, outputs = run(config, sequence)
    # failing from step 1: the warm-up steps do not count, then `patience` failing steps in a row
    first = warmup + patience
    assert alert_steps(outputs, check) == list(range(first, 21))
    assert all(out["health/alerts"] == 1.0 for out in outputs[first - 1 :])
    assert all(out["health/alerts"] == 0.0 for out in outputs[: first - 1])


@pytest.mark.parametrize("check, values, key", FAILING)
def test_null_threshold_turns_the_check_off(check, values, key):
    config = replace(HealthConfig(warmup_steps=0, patience=1), **{key: None})
    _, outputs = run(config, with_values(healthy_run(10), 1, **values))
    assert all(f"health/{check}" not in out for out in outputs)
    assert all(out["health/alerts"] == 0.0 for out in outputs)


def test_null_turns_off_the_entropy_and_signal_checks():
    sequence = with_values(healthy_run(30), 3, policy__entropy=1e-6, reward__groups_with_signal=0.0)
    _, outputs = run(HealthConfig(warmup_steps=2, patience=1, no_signal_steps=2), sequence)
    assert alert_steps(outputs, "entropy_collapse") == list(range(3, 31))
    assert alert_steps(outputs, "no_reward_signal") == list(range(4, 31))
    config = HealthConfig(warmup_steps=2, patience=1, no_signal_steps=None, entropy_collapse_ratio=None)
    _, outputs = run(config, sequence)
    assert all("health/entropy_collapse" not in out and "health/no_reward_signal" not in out for out in outputs)
    assert all(out["health/alerts"] == 0.0 for out in outputs)


@pytest.mark.parametrize("check, values, key", FAILING)
def test_failures_shorter_than_patience_or_inside_warmup_do_not_alert(check, values, key):
    config = HealthConfig(warmup_steps=5, patience=3)
    sequence = healthy_run(30)
    for step in (2, 3, 4, 5, 6, 7):  # failing through the warm-up and one step past it ...
        sequence[step - 1] = with_values([sequence[step - 1]], 1, **values)[0]
    for step in (15, 16, 20, 21):  # ... then twice for two steps: never 3 in a row after the warm-up
        sequence[step - 1] = with_values([sequence[step - 1]], 1, **values)[0]
    _, outputs = run(config, sequence)
    assert alert_steps(outputs, check) == []


@pytest.mark.parametrize(
    "key, value, metric",
    [
        ("max_clip_frac", 0.3, "policy/clip_frac"),
        ("max_kl_to_ref", 1.0, "policy/kl_to_ref_k3"),
        ("max_logprob_diff", 0.1, "policy/rollout_train_logprob_abs_diff_mean"),
    ],
)
def test_absolute_thresholds_compare_against_the_configured_value(key, value, metric):
    def alerts(threshold, observed):
        config = replace(HealthConfig(warmup_steps=0, patience=1), **{key: threshold})
        _, outputs = run(config, with_values(healthy_run(3), 1, **{metric.replace("/", "__"): observed}))
        return outputs[-1]["health/alerts"]

    assert alerts(value, value * 1.01) == 1.0
    assert alerts(value, value * 0.99) == 0.0
    assert alerts(value * 2, value * 1.01) == 0.0  # a looser threshold lets the same value pass


def test_kl_falls_back_to_the_in_loss_kl_metric():
    sequence = [{"policy/kl_vs_ref": 2.0} for _ in range(3)]
    _, outputs = run(HealthConfig(warmup_steps=0, patience=1), sequence)
    assert alert_steps(outputs, "kl_to_ref") == [1, 2, 3]


def test_entropy_collapse_is_relative_to_the_warmup_mean():
    warmup = [{"policy/entropy": value} for value in (1.8, 2.2, 2.0, 2.0)]  # reference 2.0
    falling = [{"policy/entropy": value} for value in (0.5, 0.3, 0.21, 0.19, 0.15, 0.1)]

    def alerts(ratio, patience=1):
        config = HealthConfig(warmup_steps=4, patience=patience, entropy_collapse_ratio=ratio)
        return alert_steps(run(config, warmup + falling)[1], "entropy_collapse")

    assert alerts(0.1) == [8, 9, 10]  # below 0.2 from the 8th step on
    assert alerts(0.2) == [6, 7, 8, 9, 10]  # 0.4 limit: from 0.3 on
    assert alerts(0.1, patience=2) == [9, 10]
    assert alerts(0.01) == []


def test_entropy_reference_comes_from_the_first_step_without_warmup():
    sequence = [{"policy/entropy": value} for value in (1.0, 0.5, 0.09)]
    _, outputs = run(HealthConfig(warmup_steps=0, patience=1), sequence)
    assert alert_steps(outputs, "entropy_collapse") == [3]


def test_grad_norm_spike_needs_the_factor_and_adapts_through_the_window():
    level_shift = [{"policy/grad_norm": 1.0}] * 30 + [{"policy/grad_norm": 20.0}] * 10

    def alerts(factor=10.0, window=20, patience=3):
        config = HealthConfig(warmup_steps=0, patience=patience, grad_norm_spike_factor=factor, grad_norm_window=window)
        return alert_steps(run(config, level_shift)[1], "grad_norm_spike")

    assert alerts() == list(range(33, 41))  # 20 > 10 x median 1 from step 31; alert after 3 in a row
    assert alerts(factor=25.0) == []  # 20 is not 25 x the median
    # a window of 5 holds three 20s by step 34, so its median becomes 20 and the failure ends after 3 steps
    assert alerts(window=5) == [33]
    assert alerts(window=5, patience=4) == []
    assert alerts(window=20, patience=4) == list(range(34, 41))


def test_grad_norm_spike_waits_for_three_earlier_steps():
    sequence = [{"policy/grad_norm": value} for value in (1.0, 1.0, 50.0, 1.0, 50.0)]
    _, outputs = run(HealthConfig(warmup_steps=0, patience=1), sequence)
    assert "health/grad_norm_spike" not in outputs[2]  # only two earlier values at step 3
    assert alert_steps(outputs, "grad_norm_spike") == [5]


def test_reward_collapse_follows_the_moving_average_from_its_best():
    sequence = [{"reward/mean": 0.8}] * 30 + [{"reward/mean": 0.4}] * 20

    def alerts(drop=0.25, window=10):
        config = HealthConfig(warmup_steps=0, patience=3, reward_drop=drop, reward_window=window)
        return alert_steps(run(config, sequence)[1], "reward_collapse")

    # window 10: the average falls 0.04 a step, below 0.8 - 0.25 at the 7th low step (37); alert 2 steps later
    assert alerts() == list(range(39, 51))
    assert alerts(window=2) == list(range(34, 51))  # below at the 2nd low step (32)
    assert alerts(drop=0.5) == []  # the average never falls 0.5 below its best


def test_rising_rewards_never_count_as_collapse():
    sequence = [{"reward/mean": 0.01 * step} for step in range(100)]
    _, outputs = run(HealthConfig(warmup_steps=0, patience=1), sequence)
    assert alert_steps(outputs, "reward_collapse") == []


def test_no_reward_signal_needs_its_own_number_of_steps():
    sequence = with_values(healthy_run(30), 11, reward__groups_with_signal=0.0)

    def alerts(steps, patience=3):
        config = HealthConfig(warmup_steps=5, patience=patience, no_signal_steps=steps)
        return alert_steps(run(config, sequence, group_size=8)[1], "no_reward_signal")

    assert alerts(10) == list(range(20, 31))  # steps 11..20 without signal
    assert alerts(10, patience=1) == list(range(20, 31))  # `patience` does not apply to this check
    assert alerts(4) == list(range(14, 31))
    assert alerts(25) == []


def test_no_reward_signal_reads_the_batch_std_with_one_sample_per_prompt():
    sequence = [{"reward/groups_with_signal": 0.0, "reward/std": 0.3}] * 5 + [
        {"reward/groups_with_signal": 0.0, "reward/std": 0.0}
    ] * 5
    config = HealthConfig(warmup_steps=0, no_signal_steps=3)
    assert alert_steps(run(config, sequence, group_size=1)[1], "no_reward_signal") == [8, 9, 10]
    assert alert_steps(run(config, sequence, group_size=4)[1], "no_reward_signal") == [3, 4, 5, 6, 7, 8, 9, 10]


def test_absent_metrics_skip_their_checks():
    _, outputs = run(HealthConfig(warmup_steps=0), [{"reward/mean": 0.5, "policy/grad_norm": 1.0}] * 12)
    assert set(outputs[-1]) == {"health/grad_norm_spike", "health/reward_collapse", "health/alerts"}


def test_flag_clears_when_the_metric_recovers(caplog):
    sequence = with_values(healthy_run(20), 5, policy__clip_frac=0.9)
    sequence = with_values(sequence, 12, policy__clip_frac=0.05)
    with caplog.at_level(logging.INFO, logger="skyrl_train.health"):
        _, outputs = run(HealthConfig(warmup_steps=0, patience=2), sequence)
    assert alert_steps(outputs, "clip_frac") == list(range(6, 12))
    assert outputs[11]["health/clip_frac"] == 0.0
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]  # one warning per alert, then recovery
    assert "recovered at step 12" in caplog.records[1].getMessage()


def test_warning_names_check_value_threshold_key_and_causes(caplog):
    sequence = with_values(healthy_run(6), 1, policy__clip_frac=0.45)
    with caplog.at_level(logging.WARNING, logger="skyrl_train.health"):
        run(HealthConfig(warmup_steps=2, patience=2), sequence)
    (record,) = caplog.records
    message = record.getMessage()
    assert record.levelname == "WARNING"
    for part in ("'clip_frac'", "step 4", "policy/clip_frac = 0.45", "> 0.3", "trainer.health.max_clip_frac"):
        assert part in message, part
    assert "learning rate too high" in message


def test_stop_on_alert_raises_with_the_same_message_naming_the_key():
    sequence = with_values(healthy_run(8), 1, policy__rollout_train_logprob_abs_diff_mean=0.7)
    monitor = HealthMonitor(HealthConfig(warmup_steps=2, patience=2, stop_on_alert=True), group_size=8)
    for step, metrics in enumerate(sequence, start=1):
        out = monitor.observe(step, metrics)
        if out["health/alerts"]:
            break
        monitor.raise_if_stopping()
    assert step == 4 and out["health/logprob_diff"] == 1.0  # the flag is returned before the stop
    with pytest.raises(TrainingHealthError) as caught:
        monitor.raise_if_stopping()
    error = caught.value
    assert error.step == 4 and [alert.check for alert in error.alerts] == ["logprob_diff"]
    text = str(error)
    assert "training stopped at step 4" in text
    assert "trainer.health.max_logprob_diff" in text and "0.7 > 0.1" in text
    assert error.alerts[0].message in text


def test_without_stop_on_alert_nothing_is_raised():
    sequence = with_values(healthy_run(8), 1, policy__rollout_train_logprob_abs_diff_mean=0.7)
    monitor, outputs = run(HealthConfig(warmup_steps=0, patience=1, stop_on_alert=False), sequence)
    assert alert_steps(outputs, "logprob_diff") == list(range(1, 9))
    monitor.raise_if_stopping()


def test_disabled_monitor_returns_nothing_and_never_stops():
    sequence = with_values(healthy_run(8), 1, policy__clip_frac=0.9)
    monitor, outputs = run(HealthConfig(enabled=False, warmup_steps=0, patience=1, stop_on_alert=True), sequence)
    assert outputs == [{}] * 8
    monitor.raise_if_stopping()


def test_from_config_reads_the_health_section_and_the_group_size():
    cfg = SkyRLConfig.from_cli_overrides(
        ["trainer.policy.model.path=m", "trainer.health.patience=7", "generator.n_samples_per_prompt=1"],
        validate=False,
    )
    monitor = HealthMonitor.from_config(cfg)
    assert monitor.config.patience == 7 and monitor.group_size == 1


def _quickstart_trace() -> list[dict[str, float]]:
    """The checked metrics of every step of a real CPU quickstart run (`bash scripts/quickstart.sh`, 450 steps at
    temperature 0.7, 2026-11-27), saved from its jsonl log."""
    lines = (Path(__file__).parent / "data" / "quickstart_health_trace.csv").read_text().splitlines()
    names = lines[0].split(",")[1:]
    return [dict(zip(names, map(float, line.split(",")[1:]), strict=True)) for line in lines[1:]]


def test_the_real_quickstart_run_never_alerts_with_the_defaults():
    trace = _quickstart_trace()
    assert len(trace) == 450
    _, outputs = run(HealthConfig(), trace, group_size=8)
    assert sum(out["health/alerts"] for out in outputs) == 0
    evaluated = {name for name in outputs[-1] if name != "health/alerts"}
    assert evaluated == {f"health/{check}" for check in CHECKS if check != "kl_to_ref"}  # no reference model
    # the trace does exercise the relative checks: its entropy fell to 0.48 of the warm-up mean
    _, outputs = run(HealthConfig(entropy_collapse_ratio=0.6), trace, group_size=8)
    assert alert_steps(outputs, "entropy_collapse")
