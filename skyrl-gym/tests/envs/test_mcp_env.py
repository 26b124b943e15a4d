"""Tests for the `mcp` env: the reward rule on hand-worked cases, config and ground-truth validation, and full
episodes against the example MCP server over stdio and streamable HTTP."""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.envs.mcp.env import MCPEnv, with_tools_in_system_message
from skyrl_gym.envs.mcp.reward import (
    MCPGroundTruth,
    answers_match,
    normalize_answer,
    parse_ground_truth,
    score_episode,
    tool_was_called,
)
from skyrl_gym.tools.mcp import MCPConnectionError

SERVER_SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "mcp" / "calculator_server.py"
PROMPT = [{"role": "user", "content": "What is 6 times 7?"}]


def stdio_server(*flags: str) -> dict:
    """Config that starts the example server over stdio with this interpreter (and extra command-line flags)."""
    return {"transport": "stdio", "command": sys.executable, "args": [str(SERVER_SCRIPT), *flags]}


def make_env(servers: dict, ground_truth: object, **config: object) -> MCPEnv:
    """Build the registered `mcp` env with these servers, ground truth and extra env_config keys."""
    extras = {"reward_spec": {"method": "rule", "ground_truth": ground_truth}}
    return skyrl_gym.make("mcp", env_config={"servers": servers, **config}, extras=extras)


def call(name: str, **arguments: object) -> str:
    """A `<tool_call>` block as a model would write it."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def http_server(mcp_http_url: str) -> dict:
    """The server config of the example server running over streamable HTTP."""
    return {"transport": "http", "url": mcp_http_url}


# ----- the reward rule (no server) -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("prediction", "target", "match"),
    [
        ("42", "42", True),
        (" 42. ", "42", True),
        ("42.0", "42", True),
        ("4.20e1", "42", True),
        ("1,000", "1000", True),
        ("-3", "3", False),
        ("0.1", "0.10", True),
        ("-0", "0", True),
        ("Paris", "paris", True),
        ('"New   York"', "new york", True),
        ("New York City", "New York", False),
        ("3.5", "35", False),
        ("x = 3", "3", False),
        ("", "0", False),
        (None, "42", False),
    ],
)
def test_answer_matching_by_hand(prediction: str | None, target: str, match: bool) -> None:
    assert answers_match(prediction, target) is match


def test_normalize_answer_examples() -> None:
    assert normalize_answer("  Ｈello\n World!  ") == "hello world"
    assert normalize_answer("`7`") == normalize_answer("7.000") == "7"
    assert normalize_answer("1e400") == "1E+400"


def test_required_tools_match_qualified_or_bare_names() -> None:
    called = ["calc__multiply", "notes__save"]
    assert tool_was_called("calc__multiply", called)
    assert tool_was_called("multiply", called)
    assert not tool_was_called("other__multiply", called)
    assert not tool_was_called("add", called)


def test_reward_is_all_or_nothing_or_the_fraction_met() -> None:
    truth = MCPGroundTruth(answer="42", required_tools=("calc__multiply", "add"))
    assert score_episode(truth, "42", ["calc__multiply", "calc__add"]) == (
        1.0,
        {"answer": True, "tool:calc__multiply": True, "tool:add": True},
    )
    assert score_episode(truth, "42", ["calc__multiply"])[0] == 0.0
    assert score_episode(truth, "42", ["calc__multiply"], partial_credit=True)[0] == pytest.approx(2 / 3)
    assert score_episode(truth, "41", [], partial_credit=True) == (
        0.0,
        {"answer": False, "tool:calc__multiply": False, "tool:add": False},
    )
    answer_only = parse_ground_truth({"answer": 42})
    assert score_episode(answer_only, "42.0", []) == (1.0, {"answer": True})
    assert score_episode(answer_only, None, ["calc__add"]) == (0.0, {"answer": False})
    tools_only = parse_ground_truth({"required_tools": ["add"]})
    assert score_episode(tools_only, None, ["calc__add"]) == (1.0, {"tool:add": True})


@pytest.mark.parametrize(
    ("ground_truth", "message"),
    [
        ("42", "expected a dict"),
        ({}, "neither 'answer' nor 'required_tools'"),
        ({"answer": "  "}, "answer is '  '; expected a non-empty string"),
        ({"answer": 4.5}, "answer is 4.5"),
        ({"answer": True}, "answer is True"),
        ({"required_tools": "calc__add"}, "required_tools is 'calc__add'; expected a list"),
        ({"required_tools": ["add", ""]}, "required_tools"),
        ({"answer": "1", "required_tool": ["add"]}, r"unknown keys \['required_tool'\]"),
    ],
)
def test_malformed_ground_truth_raises_naming_the_field(ground_truth: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_ground_truth(ground_truth)
    with pytest.raises(ValueError, match="reward_spec.ground_truth"):
        make_env({"calc": stdio_server()}, ground_truth)


def test_env_config_is_validated_without_connecting() -> None:
    truth = {"answer": "1"}
    with pytest.raises(ValueError, match="MCP server 'web': field 'url'"):
        make_env({"web": {"transport": "http", "url": "localhost:80"}}, truth)
    with pytest.raises(ValueError, match="MCP server 'calc': field 'command'"):
        make_env({"calc": {"transport": "stdio", "args": ["x"]}}, truth)
    with pytest.raises(ValueError, match="'servers' must be a non-empty dict"):
        make_env({}, truth)
    with pytest.raises(ValueError, match=r"unknown env_config keys \['partial_credits'\]"):
        make_env({"calc": stdio_server()}, truth, partial_credits=True)
    with pytest.raises(ValueError, match="'partial_credit' must be true or false"):
        make_env({"calc": stdio_server()}, truth, partial_credit="yes")
    with pytest.raises(ValueError, match="'max_tool_calls_per_turn' must be a positive integer"):
        make_env({"calc": stdio_server()}, truth, max_tool_calls_per_turn=0)
    env = make_env({"calc": stdio_server()}, truth)
    assert env.max_turns == 5 and env.groups == {}  # nothing started before init
    env.close()


def test_tool_list_goes_into_the_system_message() -> None:
    schemas = [{"type": "function", "function": {"name": "calc__add", "description": "Add.", "parameters": {}}}]
    added = with_tools_in_system_message(PROMPT, schemas, 3)
    assert [m["role"] for m in added] == ["system", "user"] and '"calc__add"' in added[0]["content"]
    assert "up to 3 calls" in added[0]["content"] and "<answer>" in added[0]["content"]
    prompt = [{"role": "system", "content": "Be brief."}, *PROMPT]
    extended = with_tools_in_system_message(prompt, schemas, 3)
    assert len(extended) == 2 and extended[0]["content"].startswith("Be brief.\n\nYou can call these tools:")
    assert prompt[0]["content"] == "Be brief."  # the caller's prompt is not modified


# ----- episodes against a real server ----------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_an_episode_that_calls_the_tool_and_answers_gets_reward_one(transport: str, request) -> None:
    server = stdio_server() if transport == "stdio" else request.getfixturevalue("http_server")
    env = make_env({"calc": server}, {"answer": "42", "required_tools": ["calc__multiply"]})
    try:
        prompt, info = env.init(PROMPT)
        assert prompt == PROMPT
        names = [schema["function"]["name"] for schema in info["tools"]]
        assert "calc__multiply" in names and "calc__add" in names

        step = env.step("Let me compute. " + call("calc__multiply", a=6, b=7))
        assert step["done"] is False and step["reward"] == 0.0
        assert step["observations"] == [{"role": "tool", "name": "calc__multiply", "content": "42.0"}]
        assert step["metadata"]["tool_calls"] == [
            {"name": "calc__multiply", "arguments": {"a": 6, "b": 7}, "ok": True, "error": None}
        ]

        final = env.step("The product is <answer>42</answer>")
        assert (final["done"], final["reward"], final["observations"]) == (True, 1.0, [])
        assert final["metadata"]["conditions"] == {"answer": True, "tool:calc__multiply": True}
        assert env.get_metrics() == {
            "turns": 2,
            "episode_reward": 1.0,
            "tool_calls": 1,
            "tool_errors": 0,
            "answered": True,
        }
    finally:
        env.close()


@pytest.mark.integration
def test_answering_without_the_required_tool_gets_reward_zero(http_server: dict) -> None:
    truth = {"answer": "42", "required_tools": ["multiply"]}
    env = make_env({"calc": http_server}, truth)
    try:
        env.init(PROMPT)
        final = env.step(call("calc__add", a=40, b=2) + "<answer>42</answer>")  # the call is not run
        assert (final["done"], final["reward"]) == (True, 0.0)
        assert final["metadata"]["conditions"] == {"answer": True, "tool:multiply": False}
        assert final["metadata"]["ignored_tool_calls"] == 1
        assert env.get_metrics()["tool_calls"] == 0
    finally:
        env.close()
    partial = make_env({"calc": http_server}, truth, partial_credit=True)
    try:
        partial.init(PROMPT)
        assert partial.step("<answer>42</answer>")["reward"] == 0.5
    finally:
        partial.close()


@pytest.mark.integration
def test_bad_calls_become_error_observations(http_server: dict) -> None:
    env = make_env({"calc": http_server}, {"answer": "2"}, max_tool_calls_per_turn=3, max_turns=3)
    try:
        env.init(PROMPT)
        action = (
            "<tool_call>{not json}</tool_call>"
            + call("calc__cube", x=2)
            + call("calc__divide", a=1, b=0)
            + call("calc__add", a=1, b=1)
            + call("calc__add", a=2, b=2)
        )
        step = env.step(action)
        assert step["done"] is False
        contents = [(m["role"], m["name"], m["content"]) for m in step["observations"]]
        assert contents[0][:2] == ("tool", "invalid_tool_call") and "not valid JSON" in contents[0][2]
        assert contents[1][1] == "calc__cube" and "unknown tool 'calc__cube'" in contents[1][2]
        assert contents[2][1] == "calc__divide" and "division by zero" in contents[2][2]
        assert contents[3] == (
            "tool",
            "skipped_tool_calls",
            "Error: skipped 2 tool call(s): at most 3 are run per turn",
        )
        assert len(contents) == 4 and len(step["metadata"]["errors"]) == 4
        assert step["metadata"]["skipped_tool_calls"] == 2

        nudge = env.step("I am not sure.")
        assert nudge["observations"][0]["role"] == "user" and "<tool_call>" in nudge["observations"][0]["content"]

        last = env.step(call("calc__add", a=1, b=1))  # the last turn: the call runs, the episode ends unanswered
        assert (last["done"], last["reward"], last["observations"]) == (True, 0.0, [])
        assert last["metadata"]["no_answer"] is True and last["metadata"]["successful_tools"] == ["calc__add"]
        assert env.get_metrics() == {
            "turns": 3,
            "episode_reward": 0.0,
            "tool_calls": 4,
            "tool_errors": 4,
            "answered": False,
        }
    finally:
        env.close()


@pytest.mark.integration
def test_tools_in_the_system_prompt_and_unknown_required_tools(http_server: dict) -> None:
    env = make_env({"calc": http_server}, {"answer": "1"}, tools_in_system_prompt=True)
    try:
        prompt, info = env.init(PROMPT)
        assert prompt[0]["role"] == "system" and '"name": "calc__divide"' in prompt[0]["content"]
        assert prompt[1:] == PROMPT and len(info["tools"]) >= 6
    finally:
        env.close()
    missing = make_env({"calc": http_server}, {"required_tools": ["calc__cube"]})
    try:
        with pytest.raises(ValueError, match=r"required_tools names \['calc__cube'\]"):
            missing.init(PROMPT)
    finally:
        missing.close()


@pytest.mark.integration
@pytest.mark.filterwarnings("error")  # an unclosed loop, transport or pipe would fail the test
def test_init_reuses_the_connection_and_close_stops_the_server(child_pids: Callable[[], set[int]]) -> None:
    env = make_env({"calc": stdio_server("--debug-tools")}, {"answer": "42"})
    try:
        env.init(PROMPT)
        group = env.groups["calc"]
        pid = group.call("pid", {}).data["result"]
        assert pid in child_pids()
        assert env.step("<answer>42</answer>")["reward"] == 1.0
        env.init(PROMPT)
        assert env.groups["calc"] is group and group.connected  # same session, same process
        assert env.step(call("calc__add", a=1, b=2))["observations"][0]["content"] == "3.0"
        assert group.call("pid", {}).data["result"] == pid
    finally:
        env.close()
    gc.collect()  # finalizers of anything left open would warn now
    assert not os.path.exists(f"/proc/{pid}")  # exited and reaped
    assert not group.connected


@pytest.mark.integration
def test_an_unreachable_server_fails_init_with_the_reason(closed_port_url: str) -> None:
    env = make_env({"web": {"url": f"{closed_port_url}/mcp", "connect_timeout": 5}}, {"answer": "1"})
    try:
        with pytest.raises(MCPConnectionError, match="could not connect to MCP server 'web'"):
            env.init(PROMPT)
    finally:
        env.close()
