"""benchmarks/same_numbers.py on two folders laid out as quickstart_run.py fills them: equal runs pass, and a run
whose metrics differ at one step is caught at that step."""

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("same_numbers", REPO / "benchmarks" / "same_numbers.py")
same_numbers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(same_numbers)


def _fill(folder: Path, rewards: list[float], curve: list[list[float]]) -> Path:
    (folder / "work" / "logs" / "jsonl").mkdir(parents=True)
    lines = [{"step": step, "reward/mean": reward, "policy/loss": 0.1} for step, reward in enumerate(rewards, 1)]
    lines.append({"step": len(rewards), "eval/all/pass_at_1": curve[-1][1]})  # eval lines carry no compared metric
    (folder / "work" / "logs" / "jsonl" / "run.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    (folder / "quickstart.json").write_text(json.dumps({"eval_curve": curve, "accuracy_after": curve[-1][1]}))
    return folder


def test_identical_runs_pass_and_a_changed_step_is_named(tmp_path):
    curve = [[0, 0.24], [3, 0.3]]
    before = _fill(tmp_path / "a", [0.1, 0.2, 0.3], curve)
    after = _fill(tmp_path / "b", [0.1, 0.2, 0.3], curve)
    results = tmp_path / "same.json"
    assert same_numbers.main([str(before), str(after), "--results", str(results)]) == 0
    written = json.loads(results.read_text())
    assert written["steps_identical"] == written["steps"] == 3 and written["eval_curves_identical"]

    changed = _fill(tmp_path / "c", [0.1, 0.2000001, 0.3], curve)
    assert same_numbers.main([str(before), str(changed)]) == 1
    assert same_numbers.compare(before, changed)["first_differing_step"] == 2
    other_curve = _fill(tmp_path / "d", [0.1, 0.2, 0.3], [[0, 0.24], [3, 0.31]])
    assert same_numbers.compare(before, other_curve)["eval_curves_identical"] is False
