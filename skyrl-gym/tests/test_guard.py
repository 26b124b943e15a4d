"""Tests for guarded_step: raises, hangs and malformed outputs become failed steps with the reason."""

import threading

from skyrl_gym import BaseTextEnv, guarded_step


class ScriptedEnv(BaseTextEnv):
    def __init__(self, behaviour, release=None):
        super().__init__()
        self.behaviour = behaviour
        self.release = release

    def _step(self, action):
        if self.behaviour == "raise":
            raise ZeroDivisionError("grader divided by zero")
        if self.behaviour == "hang":
            self.release.wait(10)
        if self.behaviour == "malformed":
            return {"observations": [], "reward": "high", "done": True}
        return {"observations": [], "reward": 1.0, "done": True}


def _run(behaviour, timeout=None, release=None):
    env = ScriptedEnv(behaviour, release)
    env.init([])
    return guarded_step(env, "answer", timeout_s=timeout)


def test_a_healthy_step_passes_through():
    out = _run("ok")
    assert out["reward"] == 1.0 and "env_error" not in out["metadata"]


def test_an_exception_becomes_a_failed_step_with_traceback():
    out = _run("raise")
    error = out["metadata"]["env_error"]
    assert out["done"] is True and error["kind"] == "exception"
    assert "ZeroDivisionError: grader divided by zero" in error["reason"]
    assert "Traceback" in error["detail"]


def test_a_hang_becomes_a_timeout():
    release = threading.Event()
    try:
        out = _run("hang", timeout=0.2, release=release)
    finally:
        release.set()
    assert out["metadata"]["env_error"]["kind"] == "timeout"
    assert "did not return within 0.2 s" in out["metadata"]["env_error"]["reason"]


def test_malformed_output_is_reported_not_scored():
    out = _run("malformed")
    assert out["metadata"]["env_error"]["kind"] == "malformed_output"
    assert "'reward' is 'high'" in out["metadata"]["env_error"]["reason"]


def test_an_env_overriding_step_is_validated_too():
    class RawEnv:
        def step(self, action):
            return {"observations": [], "reward": 1.0}

    out = guarded_step(RawEnv(), "x")
    assert out["metadata"]["env_error"]["kind"] == "malformed_output"
    assert "missing 'done'" in out["metadata"]["env_error"]["reason"]
