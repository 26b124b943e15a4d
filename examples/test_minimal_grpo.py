"""examples/minimal_grpo.py run short in this process: it must take real optimizer steps on finite losses, evaluate
when its flags say, print its progress and final line, and write what it measured."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

_spec = importlib.util.spec_from_file_location("minimal_grpo", Path(__file__).resolve().parent / "minimal_grpo.py")
minimal_grpo = importlib.util.module_from_spec(_spec)
sys.modules["minimal_grpo"] = minimal_grpo  # its dataclass looks its module up there
_spec.loader.exec_module(minimal_grpo)

LR = 1e-3


@pytest.mark.slow
def test_short_run_steps_evaluates_and_reports(tmp_path, capsys):
    results = tmp_path / "minimal_grpo.json"
    argv = [
        "--steps",
        "3",
        "--prompts",
        "8",
        "--eval-size",
        "16",
        "--eval-every",
        "2",
        "--lr",
        str(LR),
        "--threads",
        "1",
    ]
    threads = torch.get_num_threads()
    try:
        result = minimal_grpo.main(argv + ["--results", str(results)])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    lines = capsys.readouterr().out.splitlines()

    assert len(result.losses) == 3 and all(math.isfinite(loss) for loss in result.losses)
    assert len(result.rewards) == 3 and all(0.0 <= reward <= 1.0 for reward in result.rewards)
    # evaluations: before training, at step 2 (--eval-every 2) and after the last step, each on 16 problems
    assert [step for step, _ in result.evaluations] == [0, 2, 3]
    assert all(0.0 <= accuracy <= 1.0 for _, accuracy in result.evaluations)
    assert "eval step 0: held-out accuracy" in lines[1] and lines[1].endswith("on 16 problems")
    assert [line.split(":")[0] for line in lines if line.startswith("eval step")] == [
        "eval step 0",
        "eval step 2",
        "eval step 3",
    ]
    assert any(line.startswith("step 3/3: reward ") for line in lines)
    assert lines[-1] == (
        f"minimal_grpo: eval accuracy before={result.accuracy_before:.4f} after={result.accuracy_after:.4f}"
    )
    assert result.accuracy_after == result.evaluations[-1][1]

    # The weights moved (all-zero advantages would give no gradient and no change), and by no more than 3 AdamW steps
    # allow: without weight decay, Adam's bias-corrected step is at most ~lr per coordinate in its first steps
    # (Cauchy-Schwarz over the moment weights bounds |m_hat| / sqrt(v_hat) by ~1.002 at steps 2 and 3).
    assert result.relative_weight_change > 0.0
    assert 0.0 < result.max_abs_weight_change <= 3 * LR * 1.05

    written = json.loads(results.read_text())
    assert written["settings"] == {
        "steps": 3,
        "prompts": 8,
        "group": 8,
        "lr": LR,
        "eval_size": 16,
        "eval_every": 2,
        "seed": 0,
        "threads": 1,
    }
    assert written["accuracy_before"] == result.accuracy_before and written["losses"] == result.losses
    assert written["benchmark"] == "examples/minimal_grpo.py" and written["date"] and written["machine"]


def test_bad_arguments_are_refused_with_the_flag_named(capsys):
    with pytest.raises(SystemExit):
        minimal_grpo.main(["--eval-size", "300"])
    assert "--eval-size must be in [1, 256]" in capsys.readouterr().err
