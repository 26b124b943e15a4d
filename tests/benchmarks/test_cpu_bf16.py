"""benchmarks/cpu_bf16.py end to end on a small model: every part and setting is timed, auto's pick for the model
matches the run's own resolution, and the results file renders."""

import json
import subprocess
import sys
from pathlib import Path

from skyrl_train.config.auto_settings import cpu_bf16_flag

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
from render_doc_results import render_cpu_bf16  # noqa: E402


def test_a_small_run_times_every_setting_and_renders(tmp_path):
    command = [sys.executable, str(REPO / "benchmarks" / "cpu_bf16.py"), "--sizes", "2", "--rounds", "1"]
    command += ["--new-tokens", "4", "--out", str(tmp_path)]
    subprocess.run(command, capture_output=True, text=True, check=True, timeout=300)
    data = json.loads((tmp_path / "cpu_bf16.json").read_text())
    (run,) = data["runs"]
    assert run["auto"] == "float32"  # 0.4 M parameters: under the threshold on any CPU
    assert data["cpu_bf16"] == cpu_bf16_flag()
    settings = [(part["part"], part["setting"]) for part in run["parts"]]
    assert settings == [
        ("decode", "float32"),
        ("decode", "bfloat16"),
        ("decode", "bfloat16, attention in bfloat16"),
        ("train", "float32"),
        ("train", "bfloat16"),
    ]
    assert all(len(part["seconds"]) == 1 and part["median_s"] > 0 for part in run["parts"])
    table = render_cpu_bf16(data)
    assert "| size 2 (0.4 M) | float32 | decode | float32 |" in table and "1.00x" in table
