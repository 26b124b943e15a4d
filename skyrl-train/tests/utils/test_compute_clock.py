"""`ComputeClock` and `timed_compute`: seconds per name, reset on read, counted even when the call raises."""

import time

import pytest

from skyrl_train.utils.compute_clock import ComputeClock, timed_compute


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
