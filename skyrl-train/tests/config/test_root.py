"""SkyRLConfig: defaults load and validate, dict/YAML round trips, derived properties, and field documentation."""

import ast
import inspect
import textwrap
import warnings

import pytest

from skyrl_train.config import ConfigTypeError, ConfigWarning, SkyRLConfig, UnknownConfigKeyError
from skyrl_train.config.docgen import field_docs
from skyrl_train.config.typecheck import field_types, is_config_class, iter_fields


def test_defaults_validate_without_problems_or_warnings():
    cfg = SkyRLConfig()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        assert cfg.validate() == []


def test_defaults_match_the_documented_gpu_setup():
    cfg = SkyRLConfig()
    assert cfg.trainer.policy.model.path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert cfg.trainer.strategy == "fsdp2"
    assert cfg.trainer.device == "auto"
    assert cfg.generator.inference_engine.backend == "hf"  # the only engine implemented so far: defaults must run
    assert cfg.trainer.algorithm.advantage_estimator == "grpo"
    assert cfg.generator.eval_sampling_params.temperature == 0.0  # greedy evaluation
    assert cfg.generator.sampling_params.temperature == 1.0
    assert cfg.trainer.critic.optimizer.lr == 5.0e-6 and cfg.trainer.policy.optimizer.lr == 1.0e-6


def test_dict_round_trip_preserves_every_value():
    cfg = SkyRLConfig.from_cli_overrides(
        ["trainer.seed=7", "+environment.env_configs.search.topk=5", "generator.sampling_params.stop=['</answer>']"]
    )
    data = cfg.to_dict()
    assert data["trainer"]["seed"] == 7
    assert SkyRLConfig.from_dict(data) == cfg
    data["trainer"]["seed"] = 8
    assert cfg.trainer.seed == 7  # to_dict is a deep copy


def test_yaml_file_round_trip(tmp_path):
    cfg = SkyRLConfig.from_cli_overrides(
        ["trainer.policy.optimizer.lr=3e-7", "trainer.logger=[console,tensorboard]", "data.val_data=[]"]
    )
    path = tmp_path / "run.yaml"
    path.write_text(cfg.to_yaml())
    assert SkyRLConfig.from_yaml_file(path) == cfg


def test_partial_yaml_file_keeps_other_defaults_and_takes_overrides(tmp_path):
    path = tmp_path / "partial.yaml"
    path.write_text("trainer:\n  train_batch_size: 64\n  policy_mini_batch_size: 16\n")
    cfg = SkyRLConfig.from_yaml_file(path, overrides=["generator.n_samples_per_prompt=4"])
    assert (cfg.trainer.train_batch_size, cfg.trainer.policy_mini_batch_size) == (64, 16)
    assert cfg.generator.n_samples_per_prompt == 4
    assert cfg.trainer.critic_mini_batch_size == 256


def test_yaml_file_reads_scientific_floats_like_hydra(tmp_path):
    path = tmp_path / "lr.yaml"
    path.write_text("trainer:\n  policy:\n    optimizer:\n      lr: 1e-5\n")  # PyYAML alone would give a string
    assert SkyRLConfig.from_yaml_file(path).trainer.policy.optimizer.lr == 1e-5


def test_yaml_file_with_unknown_key_names_its_path(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("generator:\n  sampling_params:\n    temprature: 0.5\n")
    with pytest.raises(
        UnknownConfigKeyError,
        match=r"'generator\.sampling_params\.temprature'.*'generator\.sampling_params\.temperature'",
    ):
        SkyRLConfig.from_yaml_file(path)


def test_yaml_file_that_is_not_a_mapping_is_rejected(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigTypeError, match="expected a mapping"):
        SkyRLConfig.from_yaml_file(path)


def test_from_dict_rejects_a_non_mapping_section():
    with pytest.raises(
        ConfigTypeError, match=r"'trainer\.placement': expected a mapping of PlacementConfig fields, got int 3"
    ):
        SkyRLConfig.from_dict({"trainer": {"placement": 3}})


def test_validate_catches_a_wrongly_typed_value_assigned_after_construction():
    cfg = SkyRLConfig()
    cfg.trainer.train_batch_size = "big"
    with pytest.raises(ConfigTypeError, match=r"'trainer\.train_batch_size': expected int, got str 'big'"):
        cfg.validate()


def test_single_logger_name_becomes_a_list():
    assert SkyRLConfig.from_cli_overrides(["trainer.logger=wandb"]).trainer.logger == ["wandb"]


def test_needs_ref_model_follows_kl_settings():
    assert SkyRLConfig().needs_ref_model is True  # use_kl_loss defaults to true
    no_kl = SkyRLConfig.from_cli_overrides(["trainer.algorithm.use_kl_loss=false"])
    assert no_kl.needs_ref_model is False
    kl_in_reward = SkyRLConfig.from_cli_overrides(
        ["trainer.algorithm.use_kl_loss=false", "trainer.algorithm.use_kl_in_reward=true"]
    )
    assert kl_in_reward.needs_ref_model is True


def test_needs_critic_follows_the_critic_model_path():
    assert SkyRLConfig().needs_critic is False
    ppo = SkyRLConfig.from_cli_overrides(
        ["trainer.critic.model.path=Qwen/Qwen2.5-0.5B", "trainer.algorithm.advantage_estimator=gae"]
    )
    assert ppo.needs_critic is True


def test_derived_lengths_and_paths():
    cfg = SkyRLConfig.from_cli_overrides(["data.max_prompt_length=300"])
    assert cfg.max_input_length == 300
    assert SkyRLConfig.from_cli_overrides(["generator.max_input_length=4096"]).max_input_length == 4096
    assert cfg.ref_model_path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert SkyRLConfig.from_cli_overrides(["trainer.ref.model.path=base"]).ref_model_path == "base"


def test_resolved_device_keeps_an_explicit_choice():
    assert SkyRLConfig.from_cli_overrides(["trainer.device=cpu"]).resolved_device() == "cpu"
    assert SkyRLConfig().resolved_device() in ("cpu", "cuda")


def _all_config_classes():
    classes = {SkyRLConfig}
    for _path, _owner, _name, annotation in iter_fields(SkyRLConfig):
        if is_config_class(annotation):
            classes.add(annotation)
    return sorted(classes, key=lambda cls: cls.__name__)


@pytest.mark.parametrize("cls", _all_config_classes(), ids=lambda cls: cls.__name__)
def test_every_field_and_section_is_documented(cls):
    class_node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert ast.get_docstring(class_node), f"{cls.__name__} has no class docstring"
    undocumented = set(field_types(cls)) - set(field_docs(cls))
    assert not undocumented, f"{cls.__name__} fields without a docstring: {sorted(undocumented)}"
