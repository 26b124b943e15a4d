"""The command line: `skyrl-tx version`, the refusals of bad `--base-model` values, keys files, and the tokenizer
folder that `get_info` names (a plain `tokenizers` tokenizer must load through AutoTokenizer unchanged)."""

import os
import socket
import subprocess
import sys

import pytest

from skyrl_tx import __version__
from skyrl_tx.cli import parse_base_models, read_keys, tokenizer_folder


def test_version_prints_the_package_version():
    done = subprocess.run([sys.executable, "-m", "skyrl_tx", "version"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == __version__


@pytest.mark.parametrize(
    "value,message",
    [
        ("no-equals-sign", "expects NAME=PATH"),
        ("org/model=/does/not/exist", "is not a folder with a Hugging Face model"),
    ],
)
def test_bad_base_models_are_refused_naming_the_value(value, message):
    with pytest.raises(SystemExit, match=message):
        parse_base_models([value])


def test_keys_come_from_flags_a_file_and_the_environment(tmp_path):
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("tml-a\n\n  tml-b  \n")
    assert read_keys(["tml-c"], str(keys_file), environ={}) == {"tml-a", "tml-b", "tml-c"}
    assert read_keys(None, None, environ={"SKYRL_TX_API_KEYS": "tml-d, tml-e\ntml-f"}) == {"tml-d", "tml-e", "tml-f"}
    assert read_keys(None, None, environ={}) == frozenset()


def test_dev_mode_makes_one_random_key_keeps_it_private_and_reuses_it(tmp_path):
    from skyrl_tx.cli import dev_key

    first = dev_key(tmp_path)
    assert first.startswith("tml-dev-") and len(first) == len("tml-dev-") + 32
    assert (tmp_path / "dev-api-key").stat().st_mode & 0o777 == 0o600
    assert dev_key(tmp_path) == first  # a restart keeps the owner of the runs and checkpoints
    (tmp_path / "other").mkdir()
    assert dev_key(tmp_path / "other") != first  # random, not derived from anything


@pytest.mark.parametrize(
    "host,keys,insecure,refused",
    [
        ("127.0.0.1", frozenset(), False, False),
        ("localhost", frozenset(), False, False),
        ("::1", frozenset(), False, False),
        ("0.0.0.0", frozenset(), False, True),
        ("0.0.0.0", frozenset(), True, False),
        ("0.0.0.0", frozenset({"tml-k"}), False, False),
    ],
)
def test_a_reachable_host_without_keys_is_refused_unless_insecure(host, keys, insecure, refused):
    from skyrl_tx.cli import check_exposure

    if refused:
        with pytest.raises(SystemExit, match=f"--host {host} is reachable from other machines, and no keys"):
            check_exposure(host, keys, insecure)
    else:
        check_exposure(host, keys, insecure)


def test_the_state_folder_and_database_files_become_private(tmp_path):
    import os

    from skyrl_tx.cli import private_state_dir

    folder = tmp_path / "state"
    folder.mkdir(mode=0o755)
    (folder / "skyrl_tx.db").write_text("")
    (folder / "skyrl_tx.db-wal").write_text("")
    previous = os.umask(0o022)
    try:
        private_state_dir(folder)
        assert os.umask(0o022) == 0o077  # what every later file is created with
        assert folder.stat().st_mode & 0o777 == 0o700
        assert {p.stat().st_mode & 0o777 for p in folder.glob("skyrl_tx.db*")} == {0o600}
    finally:
        os.umask(previous)


def test_the_tokenizer_folder_of_a_char_tokenizer_loads_through_autotokenizer(tmp_path):
    from transformers import AutoTokenizer

    from skyrl_train.models.loading import load_tokenizer
    from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer

    model_dir = tmp_path / "model"
    tokenizer = build_char_tokenizer()
    save_tokenizer(tokenizer, model_dir)
    (model_dir / "config.json").write_text('{"model_type": "qwen2"}')  # beside it, AutoTokenizer picks Qwen2Tokenizer
    folder = tokenizer_folder("org/model", str(model_dir), tmp_path / "data")
    assert folder != str(model_dir) and not (tmp_path / "data" / "tokenizers" / "org--model" / "config.json").exists()
    text = "12+34= 46\n"
    expected = load_tokenizer(str(model_dir)).encode(text)
    assert AutoTokenizer.from_pretrained(folder).encode(text) == expected
    assert AutoTokenizer.from_pretrained(str(model_dir)).encode(text) != expected  # why the copy exists


def test_devices_resolve_auto_and_refuse_what_torch_cannot_see():
    import torch

    from skyrl_tx.cli import resolve_device

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(SystemExit, match="must be cpu, cuda, cuda:N or auto"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="torch sees no CUDA GPU"):
            resolve_device("cuda:0")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--ray-workers", "2"], "--ray-workers needs --compute ray"),
        (["--ray-address", "auto"], "--ray-address needs --compute ray"),
        (["--ray-sharding", "fsdp2"], "--ray-sharding needs --compute ray"),
        (["--compute", "ray", "--ray-workers", "0"], "--ray-workers must be >= 1, got 0"),
        (["--sampler", "hf", "--vllm-max-lora-rank", "16"], "--vllm-max-lora-rank needs --sampler vllm"),
        (["--sampler", "vllm", "--vllm-max-lora-rank", "0"], "--vllm-max-lora-rank must be in \\[1, 512\\], got 0"),
    ],
)
def test_ray_and_sampler_flags_are_refused_where_they_would_do_nothing(argv, message):
    from skyrl_tx.cli import build_parser, check_compute_flags

    with pytest.raises(SystemExit, match=message):
        check_compute_flags(build_parser().parse_args(["serve", *argv]))
    check_compute_flags(build_parser().parse_args(["serve", "--compute", "ray", "--ray-workers", "2"]))  # accepted
    check_compute_flags(build_parser().parse_args(["serve", "--sampler", "vllm", "--vllm-max-lora-rank", "8"]))
    check_compute_flags(build_parser().parse_args(["serve", "--sampler", "vllm", "--compute", "ray"]))


def test_ray_compute_refuses_a_numbered_cuda_device_before_asking_the_cluster():
    from skyrl_tx.ray_compute import ray_device

    with pytest.raises(SystemExit, match="every rank gets its own GPU from Ray: use --device cuda"):
        ray_device("cuda:1", 2)


def test_the_auto_sampler_is_vllm_only_on_cuda_with_vllm_installed(monkeypatch):
    import importlib.util

    from skyrl_tx.cli import resolve_sampler

    real_find_spec = importlib.util.find_spec
    for installed in (True, False):  # whether `vllm` is importable is the one input faked here
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *rest, installed=installed: (
                (object() if installed else None) if name == "vllm" else real_find_spec(name, *rest)
            ),
        )
        assert resolve_sampler("auto", "cuda") == ("vllm" if installed else "hf")
        assert resolve_sampler("auto", "cuda:1") == ("vllm" if installed else "hf")
        assert resolve_sampler("auto", "cpu") == "hf"  # vLLM's CPU build samples small models ~5x slower
        assert resolve_sampler("hf", "cuda") == "hf" and resolve_sampler("vllm", "cpu") == "vllm"


def test_serve_refuses_a_taken_port_before_building_anything(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "skyrl_tx", "serve", "--port", str(port), "--checkpoint-dir", str(tmp_path / "tx")],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0 and f"--port {port}: cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr
    assert not (tmp_path / "tx").exists()  # refused before the checkpoint folder, database or model were made


def test_serve_refuses_a_reachable_host_without_keys_before_building_anything(tmp_path):
    environment = {key: value for key, value in os.environ.items() if key != "SKYRL_TX_API_KEYS"}
    done = subprocess.run(
        [sys.executable, "-m", "skyrl_tx", "serve", "--host", "0.0.0.0", "--checkpoint-dir", str(tmp_path / "tx")],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    assert done.returncode != 0 and "--host 0.0.0.0 is reachable from other machines" in done.stderr, done.stderr
    assert not (tmp_path / "tx").exists()


def test_every_serve_flag_is_documented_in_the_skyrl_tx_page():
    from pathlib import Path

    from skyrl_tx.cli import build_parser

    page = (Path(__file__).resolve().parents[2] / "docs" / "skyrl-tx.md").read_text()
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]
    flags = [flag for action in serve._actions for flag in action.option_strings if flag.startswith("--")]
    assert "--max-batch-tokens" in flags
    assert [flag for flag in flags if f"`{flag}" not in page and flag != "--help"] == []


def test_a_missing_keys_file_is_refused_naming_it(tmp_path):
    with pytest.raises(SystemExit, match=r"--api-keys-file .*nope.txt: cannot read it"):
        read_keys(None, str(tmp_path / "nope.txt"), environ={})


def test_dry_run_prints_the_resolved_settings_and_starts_nothing(tmp_path, capsys):
    from skyrl_tx.cli import main

    folder = tmp_path / "tx"
    argv = ["serve", "--dry-run", "--checkpoint-dir", str(folder), "--port", "0", "--max-datums", "9"]
    assert main([*argv, "--base-model", f"org/m={tmp_path}"]) == 0
    printed = capsys.readouterr().out
    assert "nothing started" in printed and f"base models: org/m={tmp_path}" in printed
    assert "device: cpu" in printed and "limit max_datums: 9" in printed  # auto: no CUDA here
    assert not folder.exists()  # no checkpoint folder, database or key
    # a GPU machine's settings check here: a model folder absent on this machine and a named CUDA device
    assert main([*argv, "--base-model", "org/m=/not/here", "--device", "cuda:1"]) == 0
    assert "device: cuda:1" in capsys.readouterr().out
    # a reachable host still needs keys; a keys file the run script writes later counts
    with pytest.raises(SystemExit, match="--host 0.0.0.0 is reachable"):
        main([*argv, "--host", "0.0.0.0"])
    assert main([*argv, "--host", "0.0.0.0", "--api-keys-file", str(tmp_path / "later")]) == 0
    assert "(not there yet: a real start needs it)" in capsys.readouterr().out
