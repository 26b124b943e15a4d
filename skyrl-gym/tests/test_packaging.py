"""skyrl-gym stays light: installing it resolves no torch or ray, and importing every module loads neither."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import skyrl_gym

PACKAGE_DIR = Path(__file__).resolve().parents[1]
HEAVY = {"torch", "ray", "vllm", "transformers"}


@pytest.mark.integration
@pytest.mark.slow
def test_pip_resolves_skyrl_gym_with_all_extras_without_torch_or_ray(tmp_path):
    report_file = tmp_path / "report.json"
    cmd = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
        "--report", str(report_file), f"{PACKAGE_DIR}[all]",
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(report_file.read_text())
    names = {item["metadata"]["name"].lower() for item in report["install"]}
    assert "skyrl-gym" in names and "jsonschema" in names  # the resolver really ran
    assert not names & HEAVY, f"skyrl-gym would pull in {sorted(names & HEAVY)}"


def test_importing_every_builtin_env_module_loads_no_torch_or_ray():
    # the built-in envs only: packages that use skyrl-gym (skyrl_agent, a user's script) may have registered theirs
    builtin = [spec.entry_point for spec in skyrl_gym.registry.values() if isinstance(spec.entry_point, str)]
    modules = sorted({entry.split(":")[0] for entry in builtin if entry.startswith("skyrl_gym.")})
    assert len(modules) >= 5
    code = (
        "import importlib, sys, json\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "import skyrl_gym.tools.retrieval_server\n"
        f"print(json.dumps(sorted(set(sys.modules) & set({sorted(HEAVY)!r}))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
