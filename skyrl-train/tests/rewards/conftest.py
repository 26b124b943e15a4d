"""Fixtures of the reward tests: scoring functions written to a file (as a user gives them with
`reward.function: /path/file.py:name`) and an in-process process group for reward-model workers."""

import pytest

SCORERS = '''
import os
import subprocess
import sys
import time


def score(data_source, solution_str, ground_truth, extra_info):
    """1.0 for an exact answer; `extra_info["kind"]` makes it misbehave on purpose."""
    kind = (extra_info or {}).get("kind", "")
    if kind == "sleep":
        time.sleep(float(extra_info["seconds"]))
    elif kind == "raise":
        raise ValueError("cannot parse the answer")
    elif kind == "exit":
        os._exit(3)
    elif kind == "hang_with_child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(extra_info["pid_file"], "w") as handle:
            handle.write(str(child.pid))
        time.sleep(600)
    elif kind == "bad_type":
        return "one"
    return {"score": float(solution_str == str(ground_truth)), "pid": os.getpid(), "length": len(solution_str)}


def batch_score(data_sources, solution_strs, ground_truths, extra_infos):
    """Per row: 1.0 for an exact answer, plus 0.5 for data source "bonus"."""
    if "raise" in solution_strs:
        raise RuntimeError("the batch scorer failed")
    if "short" in solution_strs:
        return [1.0]
    return [float(s == str(g)) + 0.5 * (d == "bonus") for d, s, g in zip(data_sources, solution_strs, ground_truths)]
'''


@pytest.fixture
def scorer_file(tmp_path):
    """Path of a file holding `score` (per response) and `batch_score` (lists)."""
    path = tmp_path / "scorers.py"
    path.write_text(SCORERS)
    return str(path)
