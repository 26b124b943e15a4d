"""Tests for the generic Env contract and the context-manager protocol."""

import pytest

from skyrl_gym import Env


class CountingEnv(Env[int, int]):
    def __init__(self):
        self.total = 0
        self.closed = 0

    def init(self, start: int = 0):
        self.total = start
        return self.total, {"start": start}

    def step(self, action: int):
        self.total += action
        return {"observations": self.total, "reward": float(action), "done": self.total >= 3, "metadata": {}}

    def close(self):
        self.closed += 1


def test_env_runs_an_episode_and_closes_on_context_exit():
    with CountingEnv() as env:
        obs, info = env.init(start=1)
        assert (obs, info) == (1, {"start": 1})
        assert env.step(1)["done"] is False
        out = env.step(1)
        assert out["observations"] == 3 and out["done"] is True and out["reward"] == 1.0
    assert env.closed == 1


def test_env_closes_even_when_the_body_raises():
    env = CountingEnv()
    with pytest.raises(RuntimeError), env:
        raise RuntimeError("boom")
    assert env.closed == 1


def test_unimplemented_methods_name_the_class():
    class Empty(Env):
        pass

    with pytest.raises(NotImplementedError, match="Empty must implement init"):
        Empty().init()
    with pytest.raises(NotImplementedError, match="Empty must implement step"):
        Empty().step("x")
    Empty().close()  # the default close is a no-op


def test_envs_do_not_claim_to_be_nonblocking_unless_they_say_so():
    """`nonblocking` is off by default (a runner then gives every call a thread and a time limit) and on for the
    synthetic families, whose calls parse and score a short string."""
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    assert Env.nonblocking is False and CountingEnv.nonblocking is False and BaseTextEnv.nonblocking is False
    for env_id in ("addition", "arithmetic", "binary", "countdown", "reverse"):
        assert skyrl_gym.spec(env_id).load().nonblocking is True, env_id
