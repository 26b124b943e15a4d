"""benchmarks/dynamic_sampling.py's own checks: `--model-setting`'s typed changes to the quickstart's warm start (bad
ones refused), and `--reuse-grpo` refusing a run measured with other settings or another initial model."""

import importlib.util
import json
from argparse import Namespace
from dataclasses import dataclass
from pathlib import Path

import pytest

from skyrl_train.recipes.warm_start import WarmStartSettings

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("dynamic_sampling", REPO / "benchmarks" / "dynamic_sampling.py")
dynamic_sampling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dynamic_sampling)

BASE = WarmStartSettings(task="addition", difficulty=2, size=2, seed=0, train_examples=8192)


def test_settings_change_only_the_named_fields_with_their_types():
    changed = dynamic_sampling.model_settings(BASE, ["target_low=0.1", "max_steps=300", "task=addition"])
    assert changed.target_low == 0.1 and changed.max_steps == 300 and isinstance(changed.max_steps, int)
    assert changed.train_examples == 8192 and changed.size == 2
    assert dynamic_sampling.model_settings(BASE, []) == BASE


@pytest.mark.parametrize(
    "setting, message",
    [("target_lo=0.1", "key one of"), ("target_low", "key=value"), ("max_steps=many", "max_steps takes int values")],
)
def test_bad_settings_are_refused_by_name(setting, message):
    with pytest.raises(SystemExit, match=message):
        dynamic_sampling.model_settings(BASE, [setting])


def test_a_reused_grpo_run_must_come_from_the_same_model(tmp_path):
    record = {"steps": 450, "eval_every": 25, "overrides": [], "runs": [{"name": "grpo", "curve": []}]}
    (tmp_path / "old.json").write_text(json.dumps(record))  # written before --model-setting and fingerprints existed
    args = Namespace(steps=450, eval_every=25, overrides=[], model_setting=[])
    assert dynamic_sampling.reused_grpo_run(tmp_path / "old.json", args, "abc")["name"] == "grpo"
    with pytest.raises(SystemExit, match="model_settings"):
        dynamic_sampling.reused_grpo_run(
            tmp_path / "old.json", Namespace(**{**vars(args), "model_setting": ["seed=1"]}), "abc"
        )
    (tmp_path / "new.json").write_text(json.dumps({**record, "model_fingerprint": "abc"}))
    assert dynamic_sampling.reused_grpo_run(tmp_path / "new.json", args, "abc")["name"] == "grpo"
    with pytest.raises(SystemExit, match="model_fingerprint"):
        dynamic_sampling.reused_grpo_run(tmp_path / "new.json", args, "def")


def test_a_reused_run_that_started_elsewhere_is_refused_after_the_new_run(tmp_path):
    """A file from before fingerprints: its grpo run started at 0.24, today's warm start at 0.205 (what happened on
    2026-11-28, when the warm start had changed since the file was measured)."""
    reused = {"name": "grpo", "curve": [[0.0, 0.24], [800.0, 0.375]]}
    with pytest.raises(SystemExit, match="started at held-out accuracy 0.24, this run's model starts at 0.205"):
        dynamic_sampling.check_same_start(reused, {"name": "replace", "curve": [[0.0, 0.205]]}, tmp_path / "old.json")
    dynamic_sampling.check_same_start(reused, {"name": "replace", "curve": [[0.0, 0.24]]}, tmp_path / "old.json")


def test_the_fingerprint_follows_the_weights(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "config.json").write_text("{}")
    first = dynamic_sampling.model_fingerprint(tmp_path)
    (tmp_path / "config.json").write_text('{"other": 1}')
    assert dynamic_sampling.model_fingerprint(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"weightz")
    assert dynamic_sampling.model_fingerprint(tmp_path) != first


def test_a_boolean_field_takes_true_or_false_not_any_text():
    @dataclass(frozen=True)
    class Settings:  # WarmStartSettings has no boolean field yet; bool("false") is True, so one must be parsed
        verbose: bool = True

    assert dynamic_sampling.model_settings(Settings(), ["verbose=False"]).verbose is False
    assert dynamic_sampling.model_settings(Settings(verbose=False), ["verbose=true"]).verbose is True
    with pytest.raises(SystemExit, match="verbose takes bool values"):
        dynamic_sampling.model_settings(Settings(), ["verbose=no"])
