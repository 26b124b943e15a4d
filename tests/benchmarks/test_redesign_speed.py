"""benchmarks/redesign_speed.py: reads the figures the two benchmarks really write, and summarizes rounds by median."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("redesign_speed", REPO / "benchmarks" / "redesign_speed.py")
redesign_speed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(redesign_speed)


def test_the_step_parts_it_reads_are_rows_step_breakdown_writes():
    rows = json.loads((REPO / "benchmarks" / "results" / "step_breakdown.json").read_text())["rows"]
    assert set(redesign_speed.STEP_PARTS) <= {row["part"] for row in rows}


def test_the_async_modes_it_compares_are_modes_of_async_vs_sync():
    source = (REPO / "benchmarks" / "async_vs_sync.py").read_text()
    for mode in redesign_speed.ASYNC_MODES:
        assert f'"{mode}": [' in source


def _round(step: float, one_step_off: float) -> dict:
    breakdown = {"step": step, "model compute, total": step * 0.9, "outside model compute": step * 0.1}
    ratios = {"sync_samples_per_s": 100.0, "one_step_off": one_step_off, "fully_async": 1.5}
    return {"step_breakdown": breakdown, "async_vs_sync": ratios}


def test_summary_is_the_median_of_the_rounds_and_after_over_before():
    rounds = [
        {"a": _round(0.10, 1.2), "b": _round(0.11, 1.3)},
        {"a": _round(0.30, 1.1), "b": _round(0.12, 1.0)},
        {"a": _round(0.20, 1.4), "b": _round(0.10, 1.2)},
    ]
    table = {row["figure"]: row for row in redesign_speed.summarize(rounds, ("a", "b"))}
    step = table["step_breakdown:step"]
    assert (step["a"], step["b"]) == (0.20, 0.11)
    assert step["after_over_before"] == pytest.approx(0.11 / 0.20)
    assert table["async_vs_sync:one_step_off"]["after_over_before"] == pytest.approx(1.2 / 1.2)


def test_a_checkout_without_a_venv_is_refused_by_name(tmp_path):
    with pytest.raises(SystemExit, match=str(tmp_path)):
        redesign_speed.run_in(tmp_path, "step_breakdown.py", [])


STAND_IN_STEP_BREAKDOWN = """
import json, sys
args = sys.argv[1:]
rows = [{"part": part, "seconds": seconds, "share": 0.0} for part, seconds in
        (("step", STEP), ("model compute, total", STEP * 0.9), ("outside model compute", STEP * 0.1))]
open(args[args.index("--results") + 1], "w").write(json.dumps({"rows": rows}))
"""
STAND_IN_ASYNC_VS_SYNC = """
import json, os, sys
args = sys.argv[1:]
assert args[args.index("--configs") + 1] == "plain"
speeds = {"sync": 100.0, "one_step_off": 100.0 * RATIO, "fully_async": 150.0}
runs = [{"mode": mode, "samples_per_s": speed} for mode, speed in speeds.items()]
open(os.path.join(args[args.index("--out") + 1], "async_vs_sync.json"), "w").write(json.dumps({"runs": runs}))
"""


def _checkout(root: Path, step: float, ratio: float) -> Path:
    """A folder shaped like a checkout whose two benchmarks are stand-ins writing the real scripts' result files (the
    real ones train for minutes; this checks the orchestration around them)."""
    (root / "benchmarks").mkdir(parents=True)
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (root / "benchmarks" / "step_breakdown.py").write_text(f"STEP = {step}\n" + STAND_IN_STEP_BREAKDOWN)
    (root / "benchmarks" / "async_vs_sync.py").write_text(f"RATIO = {ratio}\n" + STAND_IN_ASYNC_VS_SYNC)
    return root


def test_a_run_over_two_checkouts_writes_the_table(tmp_path):
    before, after = _checkout(tmp_path / "a", 0.2, 1.2), _checkout(tmp_path / "b", 0.1, 1.5)
    results = tmp_path / "speed.json"
    command = [sys.executable, str(REPO / "benchmarks" / "redesign_speed.py"), "--before", str(before)]
    command += ["--after", str(after), "--labels", "a", "b", "--rounds", "2", "--results", str(results)]
    subprocess.run(command, check=True, capture_output=True)
    table = {row["figure"]: row for row in json.loads(results.read_text())["table"]}
    assert table["step_breakdown:step"]["after_over_before"] == pytest.approx(0.5)
    assert table["async_vs_sync:one_step_off"]["after_over_before"] == pytest.approx(1.25)
