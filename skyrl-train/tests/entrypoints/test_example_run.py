"""The shared pieces of the CPU example scripts: the command line, the override helpers, and a finished run's eval
values and summary."""

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints.example_run import (
    ExampleParser,
    ExampleRun,
    answer_length_overrides,
    check_test_size,
    cpu_stack_overrides,
    output_overrides,
    start_run,
)
from skyrl_train.trainer import TrainResult


def test_separate_cpu_stack_and_outputs_resolve_to_the_keys_they_name(tmp_path):
    stack = cpu_stack_overrides(
        "/model", Path("/d/train.jsonl"), Path("/d/test.jsonl"), ranks=1, num_engines=3, colocate=False
    )
    cfg = SkyRLConfig.from_cli_overrides(stack + output_overrides(tmp_path))
    placement, engine, policy = cfg.trainer.placement, cfg.generator.inference_engine, cfg.trainer.policy
    assert (cfg.trainer.device, policy.model.path) == ("cpu", "/model")
    assert (cfg.data.train_data, cfg.data.val_data) == (["/d/train.jsonl"], ["/d/test.jsonl"])
    assert (placement.colocate_all, placement.policy_num_gpus_per_node, placement.num_cpus_per_worker) == (False, 1, 1)
    assert (engine.backend, engine.num_engines, engine.model_dtype) == ("hf", 3, "float32")
    assert (policy.fsdp.mixed_precision.param_dtype, policy.gradient_checkpointing) == ("float32", False)
    assert cfg.trainer.resume_mode == "none" and cfg.trainer.logger == ["console"]
    paths = (cfg.trainer.ckpt_path, cfg.trainer.export_path, cfg.trainer.log_path)
    assert paths == tuple(str(tmp_path / name) for name in ("ckpts", "exports", "logs"))


def test_eval_accuracy_reads_pass_at_n_and_is_nan_without_that_evaluation():
    cfg = SkyRLConfig.from_cli_overrides(["generator.eval_n_samples_per_prompt=4"])
    before = {"eval/all/pass_at_4": 0.25, "eval/all/mean_reward": 0.5}
    result = TrainResult(global_step=3, initial_eval=before, final_eval={"eval/all/pass_at_1": 0.75})
    run = ExampleRun(cfg, result, experiment=None)
    accuracy = run.eval_accuracy()
    assert accuracy[0] == 0.25 and math.isnan(accuracy[1])
    assert run.eval_value("mean_reward")[0] == 0.5


def test_answer_length_sets_rollout_and_eval_budgets_alike():
    cfg = SkyRLConfig.from_cli_overrides(answer_length_overrides(13))
    assert cfg.generator.sampling_params.max_generate_length == 13
    assert cfg.generator.eval_sampling_params.max_generate_length == 13


def test_parser_resolves_out_and_refuses_a_test_split_past_the_warm_start(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    parser = ExampleParser(None, out="outputs/x", train_size=10, test_size=5, max_test_size=8)
    args = parser.parse(["a.b=1", "--test-size", "8"])
    assert args.out == tmp_path / "outputs" / "x" and args.overrides == ["a.b=1"]
    with pytest.raises(SystemExit):
        parser.parse(["--test-size", "9"])
    assert "--test-size must be at most 8" in capsys.readouterr().err
    check_test_size(8, 8)
    with pytest.raises(ValueError, match="test_size must be at most 8"):
        check_test_size(9, 8)


def test_summary_prints_steps_and_the_curve_plot_only_when_asked(capsys):
    experiment = SimpleNamespace(plot_path="/runs/curves.png")
    run = ExampleRun(SkyRLConfig(), TrainResult(global_step=7, initial_eval={}, final_eval={}), experiment)
    run.print_summary(start_run())
    run.print_summary(start_run(), curves=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("  steps: 7 in ") and lines[0].endswith(" s (including set-up)")
    assert lines[1:] == ["  curves: /runs/curves.png", lines[0]]
