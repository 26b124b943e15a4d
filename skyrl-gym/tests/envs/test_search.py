"""Tests of the search env against a real BM25 retrieval server, and of its normalised exact-match reward."""

import numpy as np
import pytest

import skyrl_gym
from skyrl_gym.envs.search.env import NO_ACTION_HINT, SearchEnv
from skyrl_gym.rewards.exact_match import exact_match, normalize_answer, parse_targets

CORPUS = [
    {"id": "d1", "title": "Mont Blanc", "text": "Mont Blanc is the highest mountain in the Alps, at 4808 metres."},
    {"id": "d2", "title": "Alps", "text": "The Alps are a mountain range in Europe."},
    {"id": "d3", "title": "Danube", "text": "The Danube flows through Vienna and Budapest."},
]
PROMPT = [{"role": "user", "content": "What is the highest mountain in the Alps?"}]
SEARCH_ENV = ("search", {"topk": 2}, {"target": ["Mont Blanc", "Monte Bianco"]})
"""The `make_search_env` fixture's env id, env_config defaults and default ground truth."""


# ----- the reward rule ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, normalised",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   apple,\ta pear ", "apple pear"),
        ("U.S.A.", "usa"),
        ("Theatre of the Absurd", "theatre of absurd"),  # "the" only as a whole word
        ("“Quoted” — dash", "quoted dash"),
        ("A", ""),
        ("", ""),
    ],
)
def test_normalize_answer_hand_worked(text, normalised):
    assert normalize_answer(text) == normalised


@pytest.mark.parametrize(
    "prediction, ground_truth, reward",
    [
        ("the Mont-Blanc", "Mont Blanc", 0.0),  # the hyphen is removed, not spaced: "montblanc"
        ("the mont blanc.", "Mont Blanc", 1.0),
        ("Monte  Bianco", ["Mont Blanc", "Monte Bianco"], 1.0),
        ("Mont Blanc massif", {"target": ["Mont Blanc"]}, 0.0),
        ("mont blanc", {"target": "Mont Blanc"}, 1.0),
        ("mont blanc", np.array(["x", "Mont Blanc"], dtype=object), 1.0),
        ("mont blanc", {"target": np.array(["Mont Blanc"])}, 1.0),
        (None, "Mont Blanc", 0.0),
        ("", "Mont Blanc", 0.0),
    ],
)
def test_exact_match_hand_worked(prediction, ground_truth, reward):
    assert exact_match(prediction, ground_truth) == reward


@pytest.mark.parametrize(
    "ground_truth, message",
    [
        (None, r"reward_spec.ground_truth is NoneType"),
        (42, r"reward_spec.ground_truth is int"),
        ([], r"reward_spec.ground_truth is an empty list"),
        (["ok", 3], r"reward_spec.ground_truth\[1\] is int"),
        ({"answer": ["x"]}, r"reward_spec.ground_truth is a dict without a 'target' key"),
        ({"target": None}, r"reward_spec.ground_truth.target is NoneType"),
        ({"target": ["The"]}, r"reward_spec.ground_truth.target\[0\] is 'The', which is empty after normalisation"),
    ],
)
def test_malformed_ground_truth_raises(ground_truth, message):
    with pytest.raises(ValueError, match=message):
        parse_targets(ground_truth)
    with pytest.raises(ValueError, match=message):
        SearchEnv({}, {"reward_spec": {"ground_truth": ground_truth}})


def test_parse_targets_shapes():
    assert parse_targets("x") == ["x"]
    assert parse_targets(("x", "y")) == ["x", "y"]
    assert parse_targets({"target": ["z"]}) == ["z"]


# ----- trajectories against a real server ---------------------------------------------------------------------------
@pytest.mark.integration
def test_search_then_correct_answer(server, step_output):
    env = skyrl_gym.make(
        "search",
        env_config={"search_url": server.url, "topk": 2},
        extras={"reward_spec": {"method": "rule", "ground_truth": {"target": ["Mont Blanc"]}}},
    )
    assert isinstance(env, SearchEnv) and env.max_turns == 4
    assert env.init(PROMPT) == (PROMPT, {})
    first = env.step("<think>I should look it up.</think><search>highest mountain Alps</search>")
    passages = (
        "<information>Doc 1 (Title: Mont Blanc): Mont Blanc is the highest mountain in the Alps, "
        "at 4808 metres.\nDoc 2 (Title: Alps): The Alps are a mountain range in Europe.</information>"
    )
    assert first == step_output(0.0, False, {"search_query": "highest mountain Alps"}, passages)
    final = env.step("<answer>The Mont Blanc</answer>")
    assert final == step_output(1.0, True, {"answer": "The Mont Blanc", "correct": True})
    assert env.get_metrics() == {
        "turns": 2,
        "episode_reward": 1.0,
        "searches": 1,
        "search_errors": 0,
        "answered": True,
        "correct": True,
    }
    env.close()


@pytest.mark.integration
def test_wrong_answer_and_query_without_matches(server, make_search_env):
    env = make_search_env(server.url)
    miss = env.step("<search>zebra</search>")
    assert miss["observations"][0]["content"] == "<information>No documents matched the query.</information>"
    out = env.step("<answer>Matterhorn</answer>")
    assert out["done"] and out["reward"] == 0.0 and out["metadata"]["correct"] is False


@pytest.mark.integration
def test_no_answer_within_max_turns_scores_zero(server, make_search_env):
    env = make_search_env(server.url, max_turns=2)
    hint = env.step("hmm")
    assert hint["observations"] == [{"role": "user", "content": NO_ACTION_HINT}]
    assert hint["metadata"] == {"no_action": True}
    last = env.step("<search>Alps</search>")
    assert last["done"] and last["reward"] == 0.0 and last["observations"] == []
    assert last["metadata"] == {"truncated": True, "no_answer": True}
    assert env.get_metrics()["answered"] is False


@pytest.mark.integration
def test_unreachable_server_is_an_observation_not_an_exception(closed_port_url, make_search_env):
    url = closed_port_url
    env = make_search_env(url, max_attempts=2, backoff_base=0.01)
    out = env.step("<search>highest mountain</search>")
    assert not out["done"]
    reason = out["metadata"]["tool_error"]
    assert reason.startswith(f"search server unavailable at {url}/retrieve after 2 attempts: ConnectError")
    assert out["observations"][0]["content"] == f"<information>Error: {reason}</information>"
    # the episode goes on and is still scored by the rule
    assert env.step("<answer>monte bianco</answer>")["reward"] == 1.0
    assert env.get_metrics()["search_errors"] == 1


def test_answer_ends_even_with_a_search_in_the_same_turn(closed_port_url, make_search_env):
    env = make_search_env(closed_port_url)  # never contacted
    out = env.step("<search>x</search><answer>Mont Blanc</answer>")
    assert out["done"] and out["reward"] == 1.0


def test_close_releases_the_client(make_search_env):
    env = make_search_env("http://127.0.0.1:9")
    env.close()
    env.close()
    assert env.toolbox.groups[0]._client.is_closed


def test_config_errors(make_search_env):
    with pytest.raises(ValueError, match="topk"):
        make_search_env("http://127.0.0.1:9", topk=0)
    with pytest.raises(ValueError, match="search_url"):
        make_search_env("127.0.0.1:9")
