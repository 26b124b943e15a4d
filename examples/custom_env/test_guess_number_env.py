"""The custom-env example: registered at run time from the user's module and played through the registry."""

import pytest
from guess_number_env import ENV_ID, binary_search_policy, make_row, register_env

import skyrl_gym


@pytest.fixture(autouse=True)
def registered():
    register_env()
    yield
    skyrl_gym.deregister(ENV_ID)


def _extras(row, **more):
    return {**{k: v for k, v in row.items() if k not in ("prompt", "env_class")}, **more}


def test_binary_search_finds_the_number_and_reward_counts_turns():
    row = make_row(target=37)
    env = skyrl_gym.make(row["env_class"], env_config={"turn_penalty": 0.1}, extras=_extras(row))
    messages, _ = env.init(row["prompt"])
    player = binary_search_policy(1, 100)
    observation = messages[-1]["content"]
    rewards = []
    while True:
        out = env.step(player(observation))
        rewards.append(out["reward"])
        if out["done"]:
            break
        observation = out["observations"][-1]["content"]
    # 50 -> lower, 25 -> higher, 37 -> correct on turn 3: 1.0 - 2 * 0.1
    assert rewards == [0.0, 0.0, pytest.approx(0.8)]
    assert env.get_metrics() == {"turns": 3, "episode_reward": pytest.approx(0.8), "solved": True}


def test_unformatted_answer_gets_a_hint_and_turn_limit_ends_the_episode():
    row = make_row(target=5)
    env = skyrl_gym.make(ENV_ID, extras=_extras(row, max_turns=2))
    env.init(row["prompt"])
    first = env.step("five?")
    assert first["reward"] == 0.0 and "<guess>N</guess>" in first["observations"][0]["content"]
    last = env.step("<guess>4</guess>")
    assert last["done"] and last["metadata"]["truncated"] and env.get_metrics()["solved"] is False


def test_bad_ground_truth_is_a_clear_error():
    row = make_row(target=5)
    row["reward_spec"]["ground_truth"] = "five"
    with pytest.raises(ValueError, match="ground_truth must be the hidden integer, got 'five'"):
        skyrl_gym.make(ENV_ID, extras=_extras(row))
