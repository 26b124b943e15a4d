"""Tests for the build_embedded_model command line: options map to settings, output names the folder and accuracy."""

import pytest
import torch

from skyrl_train.entrypoints.build_embedded_model import build_parser, main, settings_from_args
from skyrl_train.recipes.embedded import embedded_model_dir
from skyrl_train.recipes.warm_start import WarmStartSettings

torch.set_num_threads(1)

TINY = dict(
    size=1, train_examples=32, eval_examples=4, max_steps=2, batch_size=8, eval_every=2, sample_prompts=2, sample_n=2
)
"""A build of seconds, as WarmStartSettings fields; TINY_ARGS asks the command line for it (`--field-name value`)."""
TINY_ARGS = [word for field, value in TINY.items() for word in (f"--{field.replace('_', '-')}", str(value))]


def test_options_become_settings_and_unset_ones_keep_defaults():
    args = build_parser().parse_args(["--task", "reverse", "--size", "2", "--lr", "0.01", "--architecture", "qwen3"])
    settings = settings_from_args(args)
    assert (settings.task, settings.size, settings.lr, settings.architecture) == ("reverse", 2, 0.01, "qwen3")
    assert settings.batch_size == WarmStartSettings().batch_size


def test_unknown_architecture_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--architecture", "llama"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'llama'" in capsys.readouterr().err


def test_bad_setting_exits_2_naming_the_field(capsys):
    assert main(["--batch-size", "0", "--no-progress"]) == 2
    assert "batch_size must be a positive integer, got 0" in capsys.readouterr().err


def test_builds_then_prints_folder_and_accuracy(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SKYRL_CACHE", str(tmp_path))
    assert main(TINY_ARGS + ["--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"embedded model: {embedded_model_dir(WarmStartSettings(**TINY))}" in out
    assert "greedy accuracy on 4 held-out problems:" in out
    assert "sampled (T=1, n=2, 2 prompts)" in out
