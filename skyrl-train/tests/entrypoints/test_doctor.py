"""`python -m skyrl_train.entrypoints.doctor` run as a subprocess: its report is true of this machine, and the smoke
step really generates and trains (on Ray and in-process) and fails with a non-zero exit when it cannot."""

import importlib.util
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import ray
import torch

import skyrl_train
from skyrl_train.inference.ray_engine import ENGINE_BUILDERS
from skyrl_train.weight_sync import WEIGHT_SYNC_STRATEGIES

pytestmark = pytest.mark.integration  # subprocesses

TIMEOUT_S = 600  # generous: the shared 2-core machine can be many times slower than idle


def run_doctor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "skyrl_train.entrypoints.doctor", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=environment,
    )


def by_name(statuses: list[dict]) -> dict[str, dict]:
    return {status["name"]: status for status in statuses}


@pytest.fixture(scope="module")
def report():
    """The `--json --no-smoke` report of this machine."""
    result = run_doctor("--json", "--no-smoke")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_versions_and_system_are_this_machines(report):
    assert report["torch"]["version"] == torch.__version__
    assert report["torch"]["build"] == ("cpu" if torch.version.cuda is None else f"cuda {torch.version.cuda}")
    packages = report["packages"]
    assert packages["ray"]["version"] == ray.__version__
    assert packages["skyrl_train"]["version"] == skyrl_train.__version__
    assert packages["skyrl_train"]["path"] == str(Path(skyrl_train.__file__).parent)
    assert packages["transformers"]["version"] == metadata.version("transformers")
    for module in ("sglang", "megatron.core"):
        installed = importlib.util.find_spec(module.split(".")[0]) is not None
        assert (packages[module]["version"] is not None) == installed, module
    system = report["system"]
    assert system["cpu_count"] == os.cpu_count()
    assert system["python"] == ".".join(map(str, sys.version_info[:3]))
    assert system["memory_total_gb"] > 0
    assert report["smoke"] == {"ran": False, "passed": None, "reason": "skipped (--no-smoke)"}


def test_cuda_is_reported_absent_with_the_reason(report):
    assert not torch.cuda.is_available()  # this test describes the CPU machine the suite runs on
    cuda = report["cuda"]
    assert cuda["available"] is False and cuda["device_count"] == 0 and cuda["devices"] == []
    assert "no CUDA support" in cuda["reason"]


def test_engine_backends_come_from_the_registry_and_the_config(report):
    engines = by_name(report["backends"]["engine"])
    assert set(ENGINE_BUILDERS.names()) <= set(engines)
    assert {"hf", "vllm", "sglang", "remote"} <= set(engines)  # the values generator.inference_engine.backend takes
    assert engines["hf"]["available"] is True and engines["hf"]["reasons"] == []
    sglang = engines["sglang"]
    assert sglang["available"] is False
    assert not any("not implemented" in reason for reason in sglang["reasons"])  # registered since issue 11
    assert any("needs CUDA" in reason for reason in sglang["reasons"])
    if importlib.util.find_spec("sglang") is None:
        assert any(
            "No module named 'sglang'" in reason and "setup.sh --gpu sglang" in reason for reason in sglang["reasons"]
        )
    vllm = engines["vllm"]
    if importlib.util.find_spec("vllm") is None:
        assert vllm["available"] is False
        assert "No module named 'vllm'" in vllm["reasons"][0] and "setup_vllm.sh" in vllm["reasons"][0]
    assert engines["remote"]["available"] is True  # registered; its servers are checked when a run starts


def test_strategies_and_weight_sync_backends(report):
    strategies = by_name(report["backends"]["strategy"])
    assert strategies["fsdp2"]["available"] is True
    assert strategies["megatron"]["available"] is False
    assert any("needs CUDA" in reason for reason in strategies["megatron"]["reasons"])
    sync = by_name(report["backends"]["weight_sync"])
    assert {"broadcast/gloo", "broadcast/nccl"} <= set(sync)
    assert set(WEIGHT_SYNC_STRATEGIES.names()) - {"broadcast"} <= set(sync)
    assert sync["broadcast/gloo"]["available"] and sync["shm"]["available"] and sync["checkpoint"]["available"]
    for name in ("broadcast/nccl", "cuda_ipc"):
        assert sync[name]["available"] is False and "needs CUDA" in sync[name]["reasons"][0], name


def test_text_report_lists_the_same_findings():
    result = run_doctor("--no-smoke")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert f"torch          {torch.__version__} (build: cpu)" in text
    assert "cuda         none: this torch build" in text
    assert "  hf               available" in text
    first_reason = "`import sglang` failed" if importlib.util.find_spec("sglang") is None else "needs CUDA"
    assert f"  sglang           unavailable: {first_reason}" in text
    assert "smoke step     skipped (--no-smoke)" in text


def test_smoke_options_are_refused_without_the_smoke_step():
    result = run_doctor("--no-smoke", "--no-ray")
    assert result.returncode == 2 and "cannot be used with --no-smoke" in result.stderr


def _check_smoke(smoke: dict, mode: str) -> None:
    assert smoke["ran"] is True and smoke["mode"] == mode, smoke
    parts = {part["name"]: part for part in smoke["parts"]}
    expected = (
        ["model", "ray", "actors", "generate", "train"] if mode == "ray" else ["model", "actors", "generate", "train"]
    )
    assert list(parts) == expected
    assert all(part["status"] == "PASS" for part in parts.values()), smoke["parts"]
    assert smoke["passed"] is True
    assert parts["generate"]["detail"].startswith("8 samples, ")
    # the trainer's log-probs of the engine's samples, with equal fp32 weights, agree (as in the trainer tests)
    difference = float(parts["train"]["detail"].rsplit(" ", 1)[-1])
    assert difference < 1e-4


@pytest.mark.slow
def test_smoke_step_on_ray_passes():
    result = run_doctor("--json")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    _check_smoke(report["smoke"], "ray")
    assert "doctor smoke" in result.stderr  # the progress bar


@pytest.mark.slow
def test_smoke_step_in_process_passes_and_reports_text():
    result = run_doctor("--no-ray")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "smoke step     PASS" in result.stdout and "(in-process, cpu)" in result.stdout
    for part in ("model", "actors", "generate", "train"):
        assert f"  {part:<10} PASS" in result.stdout
    smoke_lines = result.stdout.split("smoke step", 1)[1]
    assert "  ray " not in smoke_lines and "  model " in smoke_lines  # no Ray part


@pytest.mark.slow
def test_smoke_step_failure_exits_non_zero_and_names_the_part(tmp_path):
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    result = run_doctor("--json", "--no-ray", "--model", str(not_a_model))
    assert result.returncode == 1
    smoke = json.loads(result.stdout)["smoke"]
    parts = {part["name"]: part for part in smoke["parts"]}
    assert smoke["passed"] is False
    assert parts["model"]["status"] == "PASS" and parts["model"]["detail"] == f"using {not_a_model}"
    assert parts["actors"]["status"] == "FAIL" and str(not_a_model) in parts["actors"]["detail"]
    assert parts["generate"]["status"] == "SKIP" and parts["train"]["status"] == "SKIP"
