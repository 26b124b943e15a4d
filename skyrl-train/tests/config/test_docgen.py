"""The generated reference docs and Hydra YAML are current, and the YAML holds exactly the dataclass defaults."""

import importlib.util
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.cli import CONFIG_DIR, CONFIG_NAME
from skyrl_train.config.docgen import dump_yaml, field_docs, format_value, render_markdown, render_yaml
from skyrl_train.config.roles import CriticConfig, OptimizerConfig

REPO_ROOT = Path(__file__).resolve().parents[3]
YAML_PATH = CONFIG_DIR / f"{CONFIG_NAME}.yaml"


def _load_script():
    spec = importlib.util.spec_from_file_location("gen_config_docs", REPO_ROOT / "scripts" / "gen_config_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flatten(data: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, path))
        else:
            flat[path] = value
    return flat


def test_yaml_holds_exactly_the_dataclass_defaults():
    from_yaml = _flatten(OmegaConf.to_container(OmegaConf.load(YAML_PATH)))
    from_dataclasses = _flatten(SkyRLConfig().to_dict())
    assert sorted(from_yaml) == sorted(from_dataclasses), "keys differ"
    for key, default in from_dataclasses.items():
        assert from_yaml[key] == default and type(from_yaml[key]) is type(default), key


def test_yaml_reads_the_same_with_plain_pyyaml():
    assert SkyRLConfig.from_dict(yaml.safe_load(YAML_PATH.read_text())) == SkyRLConfig()


def test_committed_reference_docs_are_current():
    assert (REPO_ROOT / "docs" / "reference" / "configuration.md").read_text() == render_markdown(
        SkyRLConfig
    ), "run `python scripts/gen_config_docs.py`"
    assert YAML_PATH.read_text() == render_yaml(SkyRLConfig), "run `python scripts/gen_config_docs.py`"


def test_generator_script_check_mode_reports_current_files(tmp_path, monkeypatch):
    script = _load_script()
    assert script.main(["--check"]) == 0
    stale = tmp_path / "configuration.md"
    stale.write_text("old\n")
    monkeypatch.setattr(script, "DOCS_PATH", stale)
    monkeypatch.setattr(script, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(script, "YAML_PATH", tmp_path / "ppo_base_config.yaml")
    monkeypatch.setattr(script, "UPSTREAM_KEYS_PATH", tmp_path / "skyrl-keys.md")
    assert script.main(["--check"]) == 1
    assert stale.read_text() == "old\n"  # --check never writes
    assert script.main([]) == 0
    assert stale.read_text() == render_markdown(SkyRLConfig)


def test_field_docstrings_are_read_from_the_source():
    docs = field_docs(OptimizerConfig)
    assert docs["lr"] == "Peak learning rate."
    assert docs["weight_decay"] == "Decoupled (AdamW) weight decay."
    assert field_docs(CriticConfig)["model"].startswith("Critic weights")


def test_docs_show_each_key_with_type_default_and_description():
    markdown = render_markdown(SkyRLConfig)
    row = "| `trainer.strategy` | one of 'fsdp2', 'megatron' | `\"fsdp2\"` |"
    assert row in markdown
    assert "\n## `trainer`\n" in markdown and "\n### `trainer.policy`\n" in markdown
    assert "\n#### `trainer.policy.optimizer`\n" in markdown
    assert "| `trainer.max_training_steps` | int \\| null | `null` |" in markdown


def test_format_value_writes_yaml_that_reads_back_exactly():
    values = [None, True, 3, -1, 1e-06, 0.5, 2.0, "~/x", "a: b", "null", [0.9, 0.999], [], {}, {"k": [1, "v"]}]
    for value in values:
        assert yaml.safe_load(format_value(value)) == value, value
        assert OmegaConf.create({"v": yaml.safe_load(format_value(value))})["v"] == value
    assert format_value(1e-06) == "1.0e-06"


def test_dump_yaml_quotes_keys_that_yaml_would_misread():
    data = {"null": 1, "on": 2, "1x": 3, "plain_key": {"true": False}, "empty": {}}
    assert yaml.safe_load(dump_yaml(data)) == data
