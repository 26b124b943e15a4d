"""The Hydra entry: composing ppo_base_config.yaml gives the same config as from_cli_overrides; argv preparation."""

import pytest
from hydra import compose, initialize_config_dir

from skyrl_train.config import ConfigTypeError, ConfigValidationError, SkyRLConfig, UnknownConfigKeyError
from skyrl_train.config.auto_settings import resolve_auto_settings
from skyrl_train.config.cli import (
    CONFIG_DIR,
    CONFIG_NAME,
    config_from_hydra,
    prepare_hydra_args,
    render_resolved_config,
    run_cli,
)

OVERRIDES = [
    "trainer.train_batch_size=64",
    "trainer.policy_mini_batch_size=16",
    "trainer.policy.optimizer.lr=1e-5",
    "trainer.logger=[console,tensorboard]",
    "generator.sampling_params.stop=['</answer>']",
    "generator.inference_engine.backend=hf",
    "data.train_data=['~/data/a.parquet', 's3://bucket/b.parquet']",
    "trainer.placement={colocate_policy_ref: false}",
    "environment.env_configs.search.topk=5",
    "trainer.algorithm.max_seq_len=${data.max_prompt_length}",
]


def compose_config(overrides: list[str]) -> SkyRLConfig:
    hydra_overrides = [arg for arg in prepare_hydra_args(overrides) if not arg.startswith("hydra")]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return config_from_hydra(compose(config_name=CONFIG_NAME, overrides=hydra_overrides))


def test_hydra_without_overrides_gives_the_dataclass_defaults():
    assert compose_config([]) == SkyRLConfig()


def test_hydra_and_from_cli_overrides_agree():
    via_hydra = compose_config(OVERRIDES)
    assert via_hydra == SkyRLConfig.from_cli_overrides(OVERRIDES)
    assert via_hydra.environment.env_configs == {"search": {"topk": 5}}
    assert via_hydra.trainer.algorithm.max_seq_len == 512
    assert via_hydra.trainer.placement.colocate_policy_ref is False


def test_hydra_path_type_checks_and_validates():
    with pytest.raises(ConfigTypeError, match=r"'trainer\.seed': expected int, got str 'abc'"):
        compose_config(["trainer.seed=abc"])
    with pytest.raises(ConfigValidationError, match="must be divisible by trainer.policy_mini_batch_size"):
        compose_config(["trainer.train_batch_size=100"])


def test_added_unknown_key_reaches_our_check_through_hydra():
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        hydra_cfg = compose(config_name=CONFIG_NAME, overrides=["+trainer.epoch=2"])
    with pytest.raises(UnknownConfigKeyError, match=r"'trainer\.epoch'.*Did you mean 'trainer\.epochs'"):
        config_from_hydra(hydra_cfg)


def test_prepare_checks_keys_before_hydra_runs():
    with pytest.raises(UnknownConfigKeyError, match=r"Did you mean 'generator\.max_turns'"):
        prepare_hydra_args(["generator.max_turn=2"])


def test_prepare_passes_hydra_flags_and_keys_through_and_adds_quiet_defaults():
    args = prepare_hydra_args(
        ["--cfg", "job", "hydra.run.dir=/tmp/x", "trainer.seed=1", "environment.env_configs.a.b=1"]
    )
    assert args[:2] == ["--cfg", "job"]  # flags first: argparse takes the overrides only after them
    assert args[-3:] == ["hydra.run.dir=/tmp/x", "trainer.seed=1", "++environment.env_configs.a.b=1"]
    assert "hydra.output_subdir=null" in args and "hydra/job_logging=none" in args
    assert "hydra.run.dir=." not in args  # the user's choice wins


def test_run_cli_dry_run_prints_the_validated_config_instead_of_running(capsys):
    calls = []
    run_cli(calls.append, ["trainer.seed=5", "--dry-run"])
    assert calls == []
    printed = capsys.readouterr().out
    assert "  seed: 5\n" in printed and "# derived: needs_ref_model=True needs_critic=False" in printed


def test_run_cli_runs_the_task_with_the_config():
    calls = []
    run_cli(calls.append, ["trainer.seed=5"])
    assert len(calls) == 1 and calls[0].trainer.seed == 5


def test_run_cli_exits_with_status_2_and_a_message_on_bad_config(capsys):
    with pytest.raises(SystemExit) as info:
        run_cli(None, ["trainer.train_batch_size=abc"])
    assert info.value.code == 2
    assert "config error: wrong type for 'trainer.train_batch_size'" in capsys.readouterr().err


def test_rendered_config_reads_back_to_the_same_config(tmp_path):
    cfg = SkyRLConfig.from_cli_overrides(OVERRIDES)
    path = tmp_path / "printed.yaml"
    path.write_text(render_resolved_config(cfg))
    # the printed config has every `auto` speed setting resolved, as the run uses it
    resolved_cfg = resolve_auto_settings(cfg)[0]
    assert SkyRLConfig.from_yaml_file(path) == resolved_cfg
    assert resolve_auto_settings(resolved_cfg)[0] is resolved_cfg


def test_hydra_flags_still_work_alongside_overrides(capsys):
    calls = []
    run_cli(calls.append, ["--cfg", "job", "trainer.seed=3"])  # Hydra prints its composed config and stops
    assert calls == []
    assert "  seed: 3\n" in capsys.readouterr().out
