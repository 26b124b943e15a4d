"""run_gsm8k.sh passes only keys and values the real config accepts: its argument list goes through
`SkyRLConfig.from_cli_overrides`, and once through `main_base --dry-run`. No GPU is used and no model is loaded
(config validation never opens `trainer.policy.model.path`, so the hub id stays as the script writes it)."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.errors import ConfigError

SCRIPT = Path(__file__).resolve().with_name("run_gsm8k.sh")
ENTRYPOINT = ["-m", "skyrl_train.entrypoints.main_base"]


def script_argv(tmp_path: Path, *extra: str, **env: str) -> list[str]:
    """The arguments the script hands to its interpreter, captured by a stand-in `PYTHON` that records them."""
    record = tmp_path / "argv.json"
    stand_in = tmp_path / "record_argv"
    stand_in.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"with open({str(record)!r}, 'w') as handle:\n    json.dump(sys.argv[1:], handle)\n"
    )
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "PYTHON": str(stand_in), **env}
    subprocess.run(["bash", str(SCRIPT), *extra], env=environment, check=True, timeout=30)
    return json.loads(record.read_text())


@pytest.mark.parametrize("num_gpus", [4, 8])
def test_the_overrides_validate_as_a_colocated_grpo_run(tmp_path, num_gpus):
    argv = script_argv(tmp_path, NUM_GPUS=str(num_gpus))
    assert argv[:2] == ENTRYPOINT
    cfg = SkyRLConfig.from_cli_overrides(argv[2:])
    home = tmp_path / "home"
    assert cfg.data.train_data == [f"{home}/data/gsm8k/train.parquet"]
    assert cfg.data.val_data == [f"{home}/data/gsm8k/test.parquet"]
    assert cfg.trainer.policy.model.path == "Qwen/Qwen2.5-1.5B-Instruct"
    placement = cfg.trainer.placement
    assert placement.colocate_all
    assert placement.policy_num_gpus_per_node == placement.ref_num_gpus_per_node == num_gpus
    assert cfg.generator.inference_engine.num_engines == num_gpus
    assert cfg.generator.inference_engine.backend == "hf"  # the only engine this version implements
    assert cfg.trainer.algorithm.advantage_estimator == "grpo"
    assert cfg.trainer.algorithm.use_kl_loss and cfg.needs_ref_model and not cfg.needs_critic
    assert (cfg.trainer.train_batch_size, cfg.trainer.policy_mini_batch_size) == (1024, 256)
    assert cfg.generator.n_samples_per_prompt == 5
    assert cfg.trainer.policy.gradient_checkpointing
    assert cfg.trainer.policy.fsdp.mixed_precision.param_dtype == "bfloat16"
    assert cfg.generator.inference_engine.model_dtype == "bfloat16"
    assert (cfg.trainer.eval_interval, cfg.trainer.ckpt_interval) == (5, 10)
    assert cfg.trainer.logger == ["wandb"]
    assert cfg.environment.env_class == "gsm8k"


def test_environment_variables_and_extra_arguments_reach_the_config(tmp_path):
    argv = script_argv(
        tmp_path,
        "trainer.epochs=2",
        "trainer.train_batch_size=512",
        DATA_DIR="/data/gsm8k_v2",
        LOGGER="console",
        MODEL="/models/qwen",
    )
    cfg = SkyRLConfig.from_cli_overrides(argv[2:])
    assert cfg.data.train_data == ["/data/gsm8k_v2/train.parquet"]
    assert cfg.trainer.logger == ["console"]
    assert cfg.trainer.policy.model.path == "/models/qwen"
    assert cfg.trainer.epochs == 2  # extra arguments come last, so they win over the script's values
    assert cfg.trainer.train_batch_size == 512


def test_a_mistyped_key_is_rejected(tmp_path):
    argv = script_argv(tmp_path, "trainer.policy_mini_batchsize=128")
    with pytest.raises(ConfigError, match="Did you mean 'trainer.policy_mini_batch_size'"):
        SkyRLConfig.from_cli_overrides(argv[2:])


def test_a_gpu_count_that_does_not_split_the_mini_batch_is_accepted(tmp_path):
    # 256 prompts * 5 samples = 1280 sequences do not split evenly over 3 ranks: the shards differ by one row and the
    # last micro-batch is smaller, as in SkyRL (once refused here)
    argv = script_argv(tmp_path, NUM_GPUS="3")
    cfg = SkyRLConfig.from_cli_overrides(argv[2:])
    assert cfg.trainer.placement.policy_num_gpus_per_node == 3


@pytest.mark.integration
def test_dry_run_through_the_entrypoint_prints_the_resolved_config(tmp_path):
    environment = {**os.environ, "PYTHON": sys.executable, "DATA_DIR": "/data/gsm8k", "LOGGER": "console"}
    done = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"], env=environment, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    resolved = yaml.safe_load(done.stdout)
    assert resolved["data"]["train_data"] == ["/data/gsm8k/train.parquet"]
    assert resolved["trainer"]["train_batch_size"] == 1024
    assert resolved["generator"]["inference_engine"]["num_engines"] == 4
    assert "# derived: needs_ref_model=True needs_critic=False" in done.stdout
