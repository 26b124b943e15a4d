"""scripts/gpu_smoke.sh on a CPU machine: its dry run lists every item and exits 0; its items point at real tests and
valid configs within the 10-minute one-GPU budget; and its orchestrator, run for real with stand-in items (the GPU
items cannot run here) and a stand-in `nvidia-smi`, prints a line per item, the summary, the JSON report, and exits 1
when an item failed."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


smoke = _load("gpu_smoke", ROOT / "scripts/gpu_smoke.py")


@functools.cache
def _quickstart():
    """examples/quickstart/run_quickstart.py as a module (its quickstart_overrides and MODEL)."""
    return _load("run_quickstart", ROOT / "examples/quickstart/run_quickstart.py")


REQUIRED = {
    "doctor": "doctor_vllm_venv",
    "vLLM generate + logprobs vs HF on CUDA": "vllm_generate",
    "sleep/wake": "vllm_sleep_wake",
    "colocated cuda_ipc, 2 engines on 2 GPUs (M1)": "colocated_2gpu",
    "NCCL broadcast to a separate engine": "nccl_broadcast",
    "3 GRPO steps with vLLM": "grpo_vllm",
    "3 GRPO steps with SGLang": "grpo_sglang",
    "Megatron TP=1": "megatron_tp1",
    "LoRA sync to vLLM": "lora_vllm",
    "skyrl-tx with the vLLM sampler": "skyrl_tx_vllm_sampler",
    "an engine with TP=2 (M2)": "sglang_tp2",
    "a vLLM engine with TP=2 (M2)": "vllm_tp2",
    "packed micro-batches through flash-attention": "packing_flash",
}


def test_the_dry_run_lists_every_item_and_exits_0():
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_smoke.sh"), "--dry-run"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    listed = {line.split()[1].rstrip(":") for line in done.stdout.splitlines() if line.startswith(("RUN ", "SKIP "))}
    assert set(REQUIRED.values()) <= listed == {item.name for item in smoke.ITEMS}
    assert "SKIP colocated_2gpu: needs 2 GPUs: run with --gpus 2" in done.stdout
    assert "torch==2.13.0, vllm==0.32.0; `bash scripts/setup.sh --gpu vllm`" in done.stdout
    assert "torch==2.14.1, sglang==0.5.23; `bash scripts/setup.sh --gpu sglang`" in done.stdout


def test_one_gpu_items_fit_ten_minutes_and_point_at_real_tests():
    one_gpu = [item for item, reason in smoke.plan(1, 1) if reason is None and not item.needs_module]
    assert sum(item.budget_s for item in one_gpu) <= smoke.BUDGET_S == 600
    assert {item.name for item, reason in smoke.plan(3, 2) if reason is None} == {item.name for item in smoke.ITEMS}
    for item in smoke.ITEMS:
        for step in item.steps:
            if step[:2] == ("-m", "pytest"):
                paths = step[2 : step.index("-m", 2)]
                assert all((ROOT / path).exists() for path in paths), item.name


def test_the_quickstart_items_run_configs_that_validate():
    """Every quickstart item's overrides give a valid config (as on a GPU machine: `trainer.device=cuda`)."""
    from skyrl_train.config import SkyRLConfig

    quickstart = _quickstart()
    checked = 0
    for item in smoke.ITEMS:
        for step in item.steps:
            if "examples/quickstart/run_quickstart.py" in step:
                overrides = [arg for arg in step if "=" in arg and not arg.startswith("-")]
                base = quickstart.quickstart_overrides("/model", Path("/data"), Path("/out"))
                SkyRLConfig.from_cli_overrides(base + overrides)  # raises ConfigValidationError naming the key
                checked += 1
    assert checked == 9


def test_the_untimed_model_build_is_the_quickstarts_model():
    quickstart = _quickstart()
    args = smoke.EMBEDDED_MODEL
    options = {args[i][2:].replace("-", "_"): args[i + 1] for i in range(2, len(args) - 1, 2)}
    assert {name: str(getattr(quickstart.MODEL, name)) for name in options} == options


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """Both venvs point at a folder whose `bin/python` is this interpreter (counted as holding its engine),
    `nvidia-smi` lists one GPU, and the
    items are replaced by quick ones: a pass, one whose test was skipped, a failure, one over budget, a 2-GPU one, one
    whose package is missing."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setenv("SKYRL_GPU_VLLM_VENV", str(venv))
    monkeypatch.setenv("SKYRL_GPU_SGLANG_VENV", str(venv))
    monkeypatch.setattr(smoke, "visible_gpus", lambda: 1)
    monkeypatch.setattr(smoke, "has_module", lambda venv, module: module != "no_such_pkg_x")  # engines "installed"
    items = (
        smoke.Item("passes", "exits 0", "vllm", (("-c", "print('fine')"),)),
        smoke.Item("skips", "a test that did not run", "vllm", (("-c", "print('SKIPPED [1] t.py:3: no vllm')"),)),
        smoke.Item("fails", "exits 3", "sglang", (("-c", "print('boom'); raise SystemExit(3)"),)),
        smoke.Item("slow", "over budget", "vllm", (("-c", "import time; time.sleep(5)"),), budget_s=1),
        smoke.Item("two_gpus", "needs 2", "vllm", (("-c", "print('never')"),), gpus=2),
        smoke.Item("no_package", "needs a module", "vllm", (("-c", "print('never')"),), needs_module="no_such_pkg_x"),
    )
    monkeypatch.setattr(smoke, "ITEMS", items)
    return tmp_path / "logs"


def test_a_run_prints_a_line_per_item_a_table_and_a_json_report(stand_ins, capsys):
    assert smoke.main(["--logs", str(stand_ins)]) == 1
    out = capsys.readouterr().out
    assert "PASS passes" in out and "SKIP two_gpus" in out
    assert "FAIL skips" in out and "did not run: no vllm" in out
    assert "FAIL fails" in out and "exit status 3" in out and "last log line: boom" in out
    assert "FAIL slow" in out and "over its 1 s budget" in out
    assert "SKIP no_package (0.0 s): needs the no_such_pkg_x package" in out
    assert "1 passed, 3 failed, 2 skipped" in out
    report = json.loads((stand_ins / "report.json").read_text())
    assert [(item["name"], item["status"]) for item in report["items"]] == [
        ("passes", "PASS"),
        ("skips", "FAIL"),
        ("fails", "FAIL"),
        ("slow", "FAIL"),
        ("two_gpus", "SKIP"),
        ("no_package", "SKIP"),
    ]
    assert report["venvs"]["sglang"]["torch"] == "2.14.1" and os.path.exists(report["items"][0]["log"])
    assert report["venvs"]["vllm"]["engine"] == "vllm==0.32.0"
    assert smoke.main(["--logs", str(stand_ins), "passes"]) == 0


def test_a_venv_without_its_engine_is_set_up_first_or_named_with_no_setup(stand_ins, monkeypatch, capsys):
    monkeypatch.setattr(smoke, "has_module", lambda venv, module: module != "vllm")
    assert smoke.main(["--logs", str(stand_ins), "--no-setup", "passes", "fails"]) == 1
    out = capsys.readouterr().out
    assert "FAIL passes (0.0 s):" in out and "holds no vllm: run `bash scripts/setup.sh --gpu vllm` (--no-setup)" in out
    assert "FAIL fails (" in out and "exit status 3" in out  # the sglang venv has its engine: the item ran
