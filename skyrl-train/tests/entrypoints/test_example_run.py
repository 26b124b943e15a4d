"""The shared pieces of the CPU example scripts: the CPU stack and output overrides, and a finished run's eval values."""

import math
from pathlib import Path

from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints.example_run import ExampleRun, cpu_stack_overrides, output_overrides
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
