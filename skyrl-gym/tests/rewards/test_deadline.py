"""Tests for run_with_deadline: results, exceptions, timeouts from any thread, and stopping the late worker."""

import threading
import time

import pytest

from skyrl_gym.rewards.deadline import DeadlineExceeded, run_with_deadline


def _busy(seconds: float) -> str:
    end = time.perf_counter() + seconds
    count = 0
    while time.perf_counter() < end:
        count += 1
    return "finished"


def test_returns_the_result():
    assert run_with_deadline(pow, 1.0, 2, 10) == 1024


def test_exceptions_propagate_unchanged():
    with pytest.raises(ZeroDivisionError):
        run_with_deadline(lambda: 1 / 0, 1.0)


def test_a_late_call_raises_and_its_worker_is_stopped():
    start = time.perf_counter()
    with pytest.raises(DeadlineExceeded, match="_busy did not finish within 0.2 s"):
        run_with_deadline(_busy, 0.2, 30.0)
    assert time.perf_counter() - start < 1.0
    for _ in range(40):
        if not any(thread.name == "skyrl-gym-deadline" for thread in threading.enumerate()):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the interrupted worker thread is still running")


def test_works_outside_the_main_thread():
    outcome = {}

    def caller():
        try:
            run_with_deadline(_busy, 0.1, 30.0)
        except DeadlineExceeded:
            outcome["timed_out"] = True
        outcome["value"] = run_with_deadline(_busy, 2.0, 0.01)

    thread = threading.Thread(target=caller)
    thread.start()
    thread.join(5)
    assert outcome == {"timed_out": True, "value": "finished"}


@pytest.mark.parametrize("bad", [0, -1.0])
def test_timeout_must_be_positive(bad):
    with pytest.raises(ValueError, match="timeout_s"):
        run_with_deadline(pow, bad, 2, 2)
