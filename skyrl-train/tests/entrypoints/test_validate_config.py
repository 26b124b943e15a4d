"""`python -m skyrl_train.entrypoints.validate_config` prints the resolved config, or exits 2 naming the bad key."""

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.auto_settings import resolved

pytestmark = pytest.mark.integration

MODULE = "skyrl_train.entrypoints.validate_config"


def run_module(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", MODULE, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def test_dry_run_prints_the_resolved_config(tmp_path):
    overrides = ["trainer.train_batch_size=32", "trainer.policy_mini_batch_size=8", "generator.n_samples_per_prompt=4"]
    result = run_module(*overrides, "environment.env_configs.search.topk=5", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    printed = OmegaConf.to_container(OmegaConf.create(result.stdout))
    # the printed config has every `auto` speed setting chosen, as this machine resolves them
    expected = resolved(SkyRLConfig.from_cli_overrides([*overrides, "+environment.env_configs.search.topk=5"]))
    assert SkyRLConfig.from_dict(printed) == expected
    assert "# derived: needs_ref_model=True needs_critic=False" in result.stdout
    assert list(tmp_path.iterdir()) == []  # Hydra wrote no outputs/ or .hydra/ directory


def test_bad_config_exits_2_with_the_key_and_a_suggestion(tmp_path):
    result = run_module("trainer.policy.optimizer.learnig_rate=1e-5", cwd=tmp_path)
    assert result.returncode == 2
    assert "trainer.policy.optimizer.learnig_rate" in result.stderr
    assert result.stdout == ""
    invalid = run_module("generator.batched=true", "generator.max_turns=2", cwd=tmp_path)
    assert invalid.returncode == 2
    assert "generator.batched=true needs generator.max_turns=1 (got 2)" in invalid.stderr
