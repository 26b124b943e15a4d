"""The shared pieces of benchmarks/vs_trl.py (reward rule, timing, ratios, seeds, our config), without TRL installed."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.auto_settings import auto_keys
from skyrl_train.models.tiny import build_tiny_model

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("vs_trl", REPO / "benchmarks" / "vs_trl.py")
vs_trl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vs_trl)
shapes = sys.modules["shapes"]  # imported by vs_trl from the benchmarks folder
report = sys.modules["vs_trl_report"]


def test_rewards_follow_the_env_rule_for_text_and_chat_completions():
    completions = ["42", " 42<|im_end|>", "<answer>42</answer>", "41", "forty-two", ""]
    assert vs_trl.env_rewards(completions, ["42"] * 6, "addition") == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    chat = [[{"role": "assistant", "content": "107"}], [{"role": "assistant", "content": "170"}]]
    assert vs_trl.env_rewards(chat, ["107", "107"], "addition") == [1.0, 0.0]
    worked = "5/2=2 r1\n2/2=1 r0\n1/2=0 r1\n<answer>101</answer>"
    assert vs_trl.env_rewards([worked, worked.replace("101<", "111<")], ["101", "101"], "binary") == [1.0, 0.0]


def test_rewards_refuse_mismatched_lengths_and_unknown_completion_types():
    with pytest.raises(ValueError, match="2 completions but 1 ground truths"):
        vs_trl.env_rewards(["1", "2"], ["1"], "addition")
    with pytest.raises(TypeError, match="completion must be a string or a list of chat messages"):
        vs_trl.completion_text(42)


def test_step_intervals_count_the_time_between_steps():
    starts, ends = [10.0, 11.5, 13.0], [11.0, 12.5, 14.5]
    # the first step from its start; later ones from the previous end (the gaps between steps count)
    assert report.step_intervals(starts, ends) == [1.0, 1.5, 2.0]
    assert report.step_intervals([], []) == []


def test_steady_seconds_leave_out_the_warmup_steps():
    assert report.steady_seconds_per_step([5.0, 1.0, 2.0, 3.0], warmup_steps=1) == 2.0
    assert report.steady_seconds_per_step([5.0, 1.0], warmup_steps=3) == 3.0  # too few steps: all of them
    with pytest.raises(ValueError, match="no step was timed"):
        report.steady_seconds_per_step([], warmup_steps=0)


def test_moving_average_is_a_trailing_mean():
    assert report.moving_average([1.0, 3.0, 5.0, 7.0], window=2) == [1.0, 2.0, 4.0, 6.0]


def _run(step_seconds, tokens, accuracy, peak):
    return {
        "step_seconds": step_seconds,
        "generated_tokens": tokens,
        "phase_seconds": {"generate": [5.0, 1.0, 1.0]},
        "accuracy_after": accuracy,
        "peak_rss_mb": {"total": peak},
    }


def test_summary_and_ratios():
    trl = report.summarize(_run([9.0, 2.0, 2.0], [100.0, 300.0, 500.0], 0.5, 1000.0), 1, completions_per_step=16)
    ours = report.summarize(_run([9.0, 1.0, 1.0], [100.0, 300.0, 500.0], 0.6, 3000.0), 1, completions_per_step=16)
    assert trl["steps"] == 3 and trl["seconds_per_step"] == 2.0 and trl["phase_seconds"] == {"generate": 1.0}
    assert trl["phase_seconds_per_step"] == {"generate": [5.0, 1.0, 1.0]}  # kept for finding drift later
    assert trl["completions_per_second"] == 8.0
    assert trl["generated_tokens_per_second"] == 800.0 / 4.0  # kept steps' tokens over their seconds
    ratio = report.ratios(ours, trl)
    assert ratio["completions_per_second"] == 2.0 and ratio["seconds_per_step"] == 0.5
    assert ratio["generated_tokens_per_second"] == 2.0 and ratio["peak_rss_total"] == 3.0
    assert ratio["accuracy_after_difference"] == pytest.approx(0.1)


def test_seed_summary_takes_mean_and_standard_error_and_checks_the_goals():
    def seed(ratio, trl_after, ours_after):
        runs = {"trl": {"accuracy_after": trl_after}, "ours": {"accuracy_after": ours_after}}
        ratios = {"completions_per_second": ratio, "accuracy_after_difference": ours_after - trl_after}
        return {"accuracy_before": 0.2, "runs": runs, "ratios": ratios}

    summary = report.seed_summary([seed(1.7, 0.5, 0.45), seed(1.9, 0.4, 0.42), seed(2.1, 0.6, 0.6)], "short")
    assert summary["completions_per_second_ratio"]["mean"] == pytest.approx(1.9)
    assert summary["completions_per_second_ratio"]["standard_error"] == pytest.approx(0.2 / 3**0.5)
    assert summary["ratio_goal_met"]  # 1.9 >= 1.8
    diff = summary["accuracy_after_difference"]
    assert diff["mean"] == pytest.approx(-0.01) and summary["accuracy_goal_met"] == (
        diff["mean"] >= -diff["standard_error"]
    )
    assert summary["accuracy_gain"]["ours"]["mean"] == pytest.approx(0.29)
    worse = report.seed_summary([seed(1.6, 0.5, 0.3), seed(1.6, 0.5, 0.31)], "long")
    assert worse["ratio_goal_met"] and not worse["accuracy_goal_met"]  # 1.6 >= 1.5; 0.195 worse, SE 0.005


def test_our_side_sets_only_the_comparison_keys_and_leaves_every_speed_setting_auto(tmp_path):
    for shape in vs_trl.SHAPES.values():
        overrides = shapes.ours_overrides(shape, tmp_path / "model", tmp_path / "data", tmp_path, steps=7, seed=3)
        cfg = SkyRLConfig.from_cli_overrides(overrides)
        trainer = cfg.trainer
        assert trainer.policy_mini_batch_size == trainer.train_batch_size == shape.prompts_per_step
        assert trainer.policy.optimizer.scheduler == "constant" and trainer.policy.optimizer.num_warmup_steps == 0
        assert trainer.policy.optimizer.lr == shape.learning_rate and trainer.max_training_steps == 7
        assert not trainer.algorithm.use_kl_loss and trainer.seed == 3 and cfg.data.seed == 3
        assert cfg.generator.n_samples_per_prompt == shape.samples_per_prompt
        assert cfg.generator.sampling_params.max_generate_length == shape.max_new_tokens
        assert cfg.generator.sampling_params.temperature == 1.0
        # no speed key is given: each one is chosen by `auto`
        assert len(auto_keys(cfg)) == len(auto_keys(SkyRLConfig())) and "generator.batched" in auto_keys(cfg)
        assert not any(key.split("=")[0] in auto_keys(SkyRLConfig()) for key in overrides)


def test_the_short_shape_is_the_quickstart_model_and_the_long_one_is_in_range():
    quickstart = importlib.util.module_from_spec(
        spec := importlib.util.spec_from_file_location("rq", REPO / "examples" / "quickstart" / "run_quickstart.py")
    )
    spec.loader.exec_module(quickstart)
    assert shapes.SHORT.model == quickstart.MODEL
    model = build_tiny_model(shapes.LONG.model.model_spec)
    assert 20e6 <= sum(p.numel() for p in model.parameters()) <= 50e6


def test_skip_install_refuses_a_venv_without_trl(tmp_path):
    script = REPO / "benchmarks" / "vs_trl.py"
    result = subprocess.run(
        [sys.executable, str(script), "--skip-install", "--venv", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "cannot import trl, skyrl_gym and skyrl_train" in result.stderr


@pytest.mark.parametrize("size, mlp_ratio", [(2, 3), (7, 4)])
def test_trl_is_matched_to_the_precision_our_auto_picks_on_this_machine(tmp_path, size, mlp_ratio):
    """`our_compute_dtype` resolves our side's config as a run does: float32 for a small model; for the long
    shape's 21 M model bfloat16 exactly when this CPU lists native bfloat16 (what `--trl-precision match` gives TRL)."""
    from skyrl_train.config.auto_settings import cpu_bf16_flag
    from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

    model_dir = tmp_path / "model"
    build_tiny_model(TinyModelSpec(size=size, mlp_ratio=mlp_ratio)).save_pretrained(model_dir)
    expected = "bfloat16" if size == 7 and cpu_bf16_flag() is not None else "float32"
    assert vs_trl.our_compute_dtype(shapes.SHAPES["long"], model_dir, tmp_path / "data", []) == expected
    forced = ["trainer.policy.fsdp.mixed_precision.param_dtype=float32"]
    assert vs_trl.our_compute_dtype(shapes.SHAPES["long"], model_dir, tmp_path / "data", forced) == "float32"


def _side_record(step_seconds, accuracy):
    record = _run(step_seconds, [100.0] * len(step_seconds), accuracy, 1000.0)
    return {
        **record,
        "rewards": [0.5] * len(step_seconds),
        "final_model": "/nowhere",
        "stack": "a stack",
        "threads": {},
    }


def test_a_kept_work_folder_reuses_sides_already_trained_and_evaluated(tmp_path, monkeypatch):
    """A stopped `--work-dir` run resumes after its finished sides: nothing is retrained or re-evaluated (a side
    launch or an evaluation here would fail: no model exists)."""
    (tmp_path / "trl-4.json").write_text(json.dumps(_side_record([9.0, 2.0, 2.0], 0.5)))
    (tmp_path / "ours-4.json").write_text(json.dumps(_side_record([9.0, 1.0, 1.0], 0.6)))

    def no_launch(*args, **kwargs):
        raise AssertionError("a finished side was launched again")

    monkeypatch.setattr(vs_trl.subprocess, "run", no_launch)
    args = vs_trl.argparse.Namespace(steps=3, warmup_steps=1, ours_overrides=[], trl_dtype="float32")
    record = vs_trl.run_seed(args, shapes.SHAPES["short"], tmp_path, 4, tmp_path / "model", [], before=0.2)
    assert record["ratios"]["seconds_per_step"] == 0.5
    assert record["ratios"]["accuracy_after_difference"] == pytest.approx(0.1)
    assert "final_model" not in record["runs"]["ours"]


def test_a_kept_work_folder_refuses_other_settings(tmp_path):
    settings = {"shape": "long", "steps": 300, "model_dir": "/m", "ours_overrides": [], "trl_precision": "match"}
    vs_trl.check_resumable(tmp_path, settings)
    vs_trl.check_resumable(tmp_path, dict(settings))  # the same settings resume
    with pytest.raises(SystemExit, match=r"other settings \(steps: 300 there, 30 now\)"):
        vs_trl.check_resumable(tmp_path, {**settings, "steps": 30})
    with vs_trl.work_folder(str(tmp_path / "kept")) as folder:
        (folder / "trl-0.json").write_text("{}")
    assert (tmp_path / "kept" / "trl-0.json").exists()  # kept after the run
    with vs_trl.work_folder(None) as scratch:
        assert scratch.exists()
    assert not scratch.exists()


def test_each_side_is_launched_with_the_work_folder_its_phase_reads(tmp_path, monkeypatch):
    """The orchestrator's command for a side goes through the real argument parser into `run_phase`, which trains in
    and writes its results to that same folder (the training itself is replaced: it needs TRL and minutes)."""
    (tmp_path / "model_dir").write_text(str(tmp_path / "model"))
    trained_in = []

    def fake_side(shape, model_dir, data_dir, work, *rest):
        trained_in.append((model_dir, data_dir, work))
        return _side_record([9.0, 2.0, 2.0], 0.5)

    monkeypatch.setattr(vs_trl, "run_trl", fake_side)
    monkeypatch.setattr(vs_trl, "run_ours", fake_side)

    def launch(command, **kwargs):
        assert command[1] == str(REPO / "benchmarks" / "vs_trl.py")
        monkeypatch.setattr(sys, "argv", command[1:])
        assert vs_trl.main() == 0

    monkeypatch.setattr(vs_trl.subprocess, "run", launch)
    args = vs_trl.argparse.Namespace(steps=3, warmup_steps=1, ours_overrides=[], trl_dtype="float32")
    vs_trl.run_seed(args, shapes.SHAPES["short"], tmp_path, 2, tmp_path / "model", [], before=0.2)
    assert trained_in == [(tmp_path / "model", tmp_path / "data", tmp_path / "seed2")] * 2
    assert (tmp_path / "trl-2.json").exists() and (tmp_path / "ours-2.json").exists()


def test_a_side_phase_without_a_work_folder_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["vs_trl.py", "--skip-install", "--phase", "ours", "--seeds", "0"])
    with pytest.raises(SystemExit):
        vs_trl.main()
    assert "--phase needs --work-dir" in capsys.readouterr().err
