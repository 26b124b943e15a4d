"""`ComputeClock`, `timed_compute` and `PhaseTimer`: seconds per name, counted even when the call raises."""

import time

import pytest

from skyrl_train.utils.compute_clock import ComputeClock, timed_compute
from skyrl_train.utils.timer import PhaseTimer


class Worker:
    def __init__(self):
        self.compute_clock = ComputeClock()

    @timed_compute("forward")
    def forward(self, seconds):
        time.sleep(seconds)
        return seconds * 2

    @timed_compute("optim_step")
    def broken(self):
        time.sleep(0.01)
        raise RuntimeError("boom")


def test_seconds_add_up_per_name_and_reading_starts_over():
    worker = Worker()
    assert worker.forward(0.02) == 0.04 and worker.forward(0.01) == 0.02
    with pytest.raises(RuntimeError):
        worker.broken()
    seconds = worker.compute_clock.take()
    assert set(seconds) == {"forward", "optim_step"}
    assert seconds["forward"] >= 0.03 and seconds["optim_step"] >= 0.01
    assert worker.compute_clock.take() == {}
    assert Worker.forward.__name__ == "forward"  # Ray sees the real method name


def test_phase_timer_keeps_its_phases_and_reports_them_as_timing_metrics():
    timer = PhaseTimer()
    with timer("generate"):
        time.sleep(0.01)
    with timer("generate"), timer("step"):
        time.sleep(0.01)
    assert timer.seconds["generate"] >= 0.02 and timer.seconds["step"] >= 0.01
    assert timer.metrics() == {"timing/generate": timer.seconds["generate"], "timing/step": timer.seconds["step"]}
    assert set(timer.seconds) == {"generate", "step"}  # reading does not start over
