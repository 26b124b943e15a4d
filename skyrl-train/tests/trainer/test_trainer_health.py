"""The health monitor inside a real run: an alert reaches the tracker, and `stop_on_alert` ends the run there."""

import json

import pytest

from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.health import TrainingHealthError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The engine holds bf16 weights while the trainer scores in fp32, so the engine's log-probs differ from the
# trainer's by bf16 rounding (around 1e-2): far above this threshold, and a real cause the check is meant to catch.
FORCED = [
    "generator.inference_engine.model_dtype=bfloat16",
    "trainer.health.max_logprob_diff=1e-6",
    "trainer.health.warmup_steps=0",
    "trainer.health.patience=1",
    "trainer.max_training_steps=2",
    "trainer.logger=['console','jsonl']",
]


def _logged_steps(out_dir):
    (path,) = (out_dir / "logs" / "jsonl").rglob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_stop_on_alert_ends_the_run_after_logging_the_alert(
    ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path
):
    cfg = make_config(spread_tiny_model_dir, data_dir, tmp_path, *FORCED, "trainer.health.stop_on_alert=true")
    with pytest.raises(TrainingHealthError) as caught:
        BasePPOExp(cfg).run()
    error = caught.value
    assert error.step == 1 and [alert.check for alert in error.alerts] == ["logprob_diff"]
    assert "trainer.health.max_logprob_diff" in str(error)
    assert "policy/rollout_train_logprob_abs_diff_mean" in str(error)
    (logged,) = _logged_steps(tmp_path)  # step 1 was logged, step 2 never ran
    assert logged["step"] == 1 and logged["health/logprob_diff"] == 1.0 and logged["health/alerts"] >= 1.0
    assert logged["policy/rollout_train_logprob_abs_diff_mean"] > 1e-6


def test_without_stop_the_run_finishes_and_flags_every_step(
    ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path
):
    cfg = make_config(spread_tiny_model_dir, data_dir, tmp_path, *FORCED)
    result = BasePPOExp(cfg).run()
    assert result.global_step == 2
    assert result.history["health/logprob_diff"] == [(1, 1.0), (2, 1.0)]
