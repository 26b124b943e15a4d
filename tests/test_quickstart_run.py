"""benchmarks/quickstart_run.py turns what the quickstart printed and logged into its results record."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("quickstart_run", REPO / "benchmarks" / "quickstart_run.py")
quickstart_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quickstart_run)


def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    description = {
        "model": {"num_parameters": 1234},
        "warm_start": {"steps": 70},
        "accuracy": {"greedy": 0.3, "held_out_problems": 64},
    }
    (folder / "skyrl_embedded.json").write_text(json.dumps(description))
    return folder


def test_summarize_reads_the_printed_lines_the_metrics_and_the_model(tmp_path):
    lines = [
        "quickstart: [1/3] embedded model (built once, then cached)",
        f"  model: {model_folder(tmp_path)} (0.00 M parameters)",
        "quickstart: eval accuracy before=0.2500 after=0.6000",
    ]
    rows = [
        {"step": 0, "eval/all/pass_at_1": 0.25},
        {"step": 1, "timing/step": 1.0, "health/alerts": 0.0},
        {"step": 2, "timing/step": 2.0, "health/alerts": 2.0, "eval/all/pass_at_1": 0.6},
    ]
    record = quickstart_run.summarize(lines, rows, 95.04)
    assert record["model"] == {
        "num_parameters": 1234,
        "warm_start_steps": 70,
        "warm_start_greedy_accuracy": 0.3,
        "held_out_problems": 64,
    }
    assert (record["accuracy_before"], record["accuracy_after"], record["steps"]) == (0.25, 0.6, 2)
    assert record["eval_curve"] == [[0, 0.25], [2, 0.6]]
    assert record["health_alert_steps"] == 1
    assert record["mean_step_seconds"] == 1.5 and record["wall_seconds"] == 95.0


def test_summarize_refuses_a_run_without_the_accuracy_line(tmp_path):
    lines = [f"  model: {model_folder(tmp_path)} (0.00 M parameters)", "Traceback (most recent call last):"]
    with pytest.raises(ValueError, match="last line is not the accuracy line"):
        quickstart_run.summarize(lines, [], 1.0)
