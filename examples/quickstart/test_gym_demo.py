"""The quickstart gym demo, run as the script `scripts/quickstart.sh` runs it."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parent / "gym_demo.py"
SUMMARY = re.compile(r"^gym demo: (\d+) episodes, mean reward solver=([0-9.]+) noisy=([0-9.]+)$", re.MULTILINE)


def _run(*args):
    return subprocess.run([sys.executable, str(DEMO), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.integration
def test_demo_prints_summary_and_exact_solver_scores_one(tmp_path):
    result = _run("--episodes", "6", "--seed", "1", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    match = SUMMARY.search(result.stdout)
    assert match, result.stdout
    episodes, solver, noisy = int(match.group(1)), float(match.group(2)), float(match.group(3))
    assert episodes == 6 * 5 * 2  # episodes x families x policies
    assert solver == 1.0 and 0.0 <= noisy <= 1.0
    for task in ("arithmetic", "addition", "countdown", "reverse", "binary"):
        assert (tmp_path / task / "train.parquet").exists() and (tmp_path / task / "test.parquet").exists()
        assert task in result.stdout


@pytest.mark.integration
def test_demo_noise_is_honest_and_seeded():
    always_wrong = _run("--episodes", "5", "--noise", "1.0", "--tasks", "arithmetic,reverse")
    match = SUMMARY.search(always_wrong.stdout)
    assert match and float(match.group(2)) == 1.0 and float(match.group(3)) == 0.0, always_wrong.stdout
    first, second = _run("--episodes", "8", "--seed", "3"), _run("--episodes", "8", "--seed", "3")
    assert SUMMARY.search(first.stdout).group(0) == SUMMARY.search(second.stdout).group(0)


@pytest.mark.integration
def test_demo_rejects_bad_arguments():
    result = _run("--tasks", "algebra")
    assert result.returncode == 2 and "--tasks must name families" in result.stderr
