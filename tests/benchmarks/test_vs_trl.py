"""The shared pieces of benchmarks/vs_trl.py (reward rule, timing, ratios, our config), without TRL installed."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_train.config import SkyRLConfig

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("vs_trl", REPO / "benchmarks" / "vs_trl.py")
vs_trl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vs_trl)


def test_rewards_follow_the_addition_env_rule_for_text_and_chat_completions():
    completions = ["42", " 42<|im_end|>", "<answer>42</answer>", "41", "forty-two", ""]
    assert vs_trl.addition_rewards(completions, ["42"] * 6) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    chat = [[{"role": "assistant", "content": "107"}], [{"role": "assistant", "content": "170"}]]
    assert vs_trl.addition_rewards(chat, ["107", "107"]) == [1.0, 0.0]


def test_rewards_refuse_mismatched_lengths_and_unknown_completion_types():
    with pytest.raises(ValueError, match="2 completions but 1 ground truths"):
        vs_trl.addition_rewards(["1", "2"], ["1"])
    with pytest.raises(TypeError, match="completion must be a string or a list of chat messages"):
        vs_trl.completion_text(42)


def test_step_intervals_count_the_time_between_steps():
    starts, ends = [10.0, 11.5, 13.0], [11.0, 12.5, 14.5]
    # the first step from its start; later ones from the previous end (the gaps between steps count)
    assert vs_trl.step_intervals(starts, ends) == [1.0, 1.5, 2.0]
    assert vs_trl.step_intervals([], []) == []


def test_steady_seconds_leave_out_the_warmup_steps():
    assert vs_trl.steady_seconds_per_step([5.0, 1.0, 2.0, 3.0], warmup_steps=1) == 2.0
    assert vs_trl.steady_seconds_per_step([5.0, 1.0], warmup_steps=3) == 3.0  # too few steps: all of them
    with pytest.raises(ValueError, match="no step was timed"):
        vs_trl.steady_seconds_per_step([], warmup_steps=0)


def test_moving_average_is_a_trailing_mean():
    assert vs_trl.moving_average([1.0, 3.0, 5.0, 7.0], window=2) == [1.0, 2.0, 4.0, 6.0]


def test_summary_and_ratios():
    per_step = vs_trl.PROMPTS_PER_STEP * vs_trl.SAMPLES_PER_PROMPT
    trl = vs_trl.summarize(
        {"step_seconds": [9.0, 2.0, 2.0], "phase_seconds": {"generate": [5.0, 1.0, 1.0]}, "accuracy_after": 0.5}, 1
    )
    ours = vs_trl.summarize({"step_seconds": [9.0, 1.0, 1.0], "phase_seconds": {}, "accuracy_after": 0.6}, 1)
    assert trl["steps"] == 3 and trl["seconds_per_step"] == 2.0 and trl["phase_seconds"] == {"generate": 1.0}
    assert trl["phase_seconds_per_step"] == {"generate": [5.0, 1.0, 1.0]}  # kept for finding drift later
    assert trl["completions_per_second"] == per_step / 2.0
    ratio = vs_trl.ratios(ours, trl)
    assert ratio["completions_per_second"] == 2.0 and ratio["seconds_per_step"] == 0.5
    assert ratio["accuracy_after_difference"] == pytest.approx(0.1)


def test_our_side_is_the_quickstart_with_one_optimizer_step_per_batch(tmp_path):
    quickstart = vs_trl.load_quickstart()
    overrides = vs_trl.ours_overrides(quickstart, tmp_path / "model", tmp_path / "data", tmp_path, steps=7)
    cfg = SkyRLConfig.from_cli_overrides(overrides)
    trainer = cfg.trainer
    assert trainer.policy_mini_batch_size == trainer.train_batch_size == vs_trl.PROMPTS_PER_STEP
    assert trainer.policy.optimizer.scheduler == "constant" and trainer.policy.optimizer.num_warmup_steps == 0
    assert trainer.policy.optimizer.lr == vs_trl.LEARNING_RATE and trainer.max_training_steps == 7
    assert not trainer.algorithm.use_kl_loss
    assert cfg.generator.n_samples_per_prompt == vs_trl.SAMPLES_PER_PROMPT
    assert cfg.generator.sampling_params.max_generate_length == vs_trl.MAX_NEW_TOKENS
    assert cfg.generator.sampling_params.temperature == 1.0
    assert trainer.export_path == str(tmp_path / "ours" / "exports")


def test_skip_install_refuses_a_venv_without_trl(tmp_path):
    script = REPO / "benchmarks" / "vs_trl.py"
    result = subprocess.run(
        [sys.executable, str(script), "--skip-install", "--venv", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "cannot import trl, skyrl_gym and skyrl_train" in result.stderr
