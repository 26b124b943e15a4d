"""The Tinker loops run short against a local `skyrl-tx serve` they start themselves, through the official client:
both must raise held-out accuracy (the full RL run, 300 steps, is measured in docs/skyrl-tx.md)."""

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"tinker_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# Both loops train for real through a local server: minutes on a loaded 2-core machine, past the suite's 300 s default.
@pytest.mark.timeout(900)
def test_sl_loop_learns_the_answers(monkeypatch):
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    before, after = _load("sl_loop").main(["--steps", "40", "--eval-size", "128"])
    assert after >= before + 0.1, (before, after)


@pytest.mark.timeout(900)
def test_rl_loop_raises_held_out_accuracy(monkeypatch):
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    # 80 steps (the cosine schedule ends with them) of the default 300. The embedded model is warm-started on the
    # machine that runs this, and machines of one kind build different ones (float summation order): from a warm
    # start at 0.254 held-out accuracy, 40 steps reached 0.426 and the full run 0.633; from one at 0.207 (another
    # machine, 2026-11-27), 40 steps reached 0.238, 60 steps 0.254, 80 steps 0.289. So the bar is a clear gain that the
    # slower learner also clears: at least +0.04 (10 of the 256 problems) after 80 steps.
    before, after = _load("rl_loop").main(["--steps", "80", "--eval-every", "0"])
    assert after >= before + 0.04, (before, after)
