"""The OpenEnv env and tools against a real OpenEnv server on 127.0.0.1 (the demo guess-the-number environment,
written with openenv-core's server API and served by uvicorn); the env talks to it through openenv-core's generic
WebSocket client."""

import socket

import pytest

openenv = pytest.importorskip("openenv.core", reason='needs openenv-core: pip install -e "./skyrl-gym[openenv]"')

import skyrl_gym  # noqa: E402
from skyrl_gym.envs.openenv.demo_server import DemoServer  # noqa: E402
from skyrl_gym.tools.openenv import OpenEnvTools  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server_url():
    """skyrl-gym's demo OpenEnv server (guess a number; written with openenv-core's server API) on 127.0.0.1."""
    with DemoServer() as url:
        yield url


def play(env, guesses):
    prompt, _ = env.init([{"role": "user", "content": "Find the number."}])
    outputs = [env.step(f'<action>{{"guess": {g}}}</action>') for g in guesses]
    return prompt, outputs


def test_an_episode_plays_the_remote_environment_to_its_reward(server_url):
    env = skyrl_gym.make("openenv", env_config={"base_url": server_url}, extras={"seed": 6})  # secret 7
    try:
        prompt, outputs = play(env, [10, 5, 7])
    finally:
        env.close()
    assert prompt[-1]["content"] == 'Observation: {"message": "guess a number from 1 to 20"}'
    assert [o["observations"][0]["content"] for o in outputs[:2]] == [
        'Observation: {"message": "lower"}\nreward: 0.0 done: false',
        'Observation: {"message": "higher"}\nreward: 0.0 done: false',
    ]
    assert [o["reward"] for o in outputs] == [0.0, 0.0, 1.0] and [o["done"] for o in outputs] == [False, False, True]
    assert env.get_metrics()["env_reward_total"] == 1.0


def test_bad_actions_get_a_message_and_no_reward(server_url):
    env = skyrl_gym.make("openenv", env_config={"base_url": server_url}, extras={"seed": 1})
    try:
        env.init([{"role": "user", "content": "Find the number."}])
        missing = env.step("I think 3")
        broken = env.step("<action>{guess: 3}</action>")
        rejected = env.step('<action>{"guess": "three"}</action>')
    finally:
        env.close()
    assert "No action found" in missing["observations"][0]["content"]
    assert "not valid JSON" in broken["observations"][0]["content"]
    assert "OpenEnv step failed" in rejected["observations"][0]["content"] and not rejected["done"]
    assert env.get_metrics()["bad_actions"] == 3


def test_the_tools_are_one_session_each_and_report_a_dead_server(server_url):
    first, second = OpenEnvTools(server_url), OpenEnvTools(server_url)
    try:
        first.call("reset", {"seed": 0})
        second.call("reset", {"seed": 1})
        assert "correct" in first.call("step", {"action": {"guess": 1}}).output
        assert "higher" in second.call("step", {"action": {"guess": 1}}).output  # its own secret (2)
        assert not first.call("step", {"action": {"guess": 1}}).ok  # the episode is over
    finally:
        first.close()
        second.close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    tools = OpenEnvTools(dead, timeout_s=2)
    result = tools.call("reset", {})
    tools.close()
    assert not result.ok and result.service_error and "OpenEnv reset failed" in result.error
