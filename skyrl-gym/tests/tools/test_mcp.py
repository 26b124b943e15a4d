"""Tests for skyrl_gym.tools.mcp: server config validation, result conversion, and MCPToolGroup against the example
MCP server run for real over stdio and over streamable HTTP."""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skyrl_gym.errors import ToolError
from skyrl_gym.tools import Toolbox
from skyrl_gym.tools.mcp import (
    MCPConnectionError,
    MCPServerConfig,
    MCPToolGroup,
    call_result_to_tool_result,
    local_tool_name,
    parse_server_configs,
)

SERVER_SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "mcp" / "calculator_server.py"


def stdio_config(**overrides: object) -> dict:
    """Config that starts the example server (with its debug tools) over stdio with this interpreter."""
    return {"transport": "stdio", "command": sys.executable, "args": [str(SERVER_SCRIPT), "--debug-tools"], **overrides}


@pytest.fixture(scope="module", params=["stdio", "http"])
def calc(request: pytest.FixtureRequest) -> Iterator[MCPToolGroup]:
    """One connected group per transport, shared by the module's tests."""
    config = (
        stdio_config()
        if request.param == "stdio"
        else {"transport": "http", "url": request.getfixturevalue("mcp_http_url"), "headers": {"X-Trace": "1"}}
    )
    group = MCPToolGroup("calc", config)
    yield group
    group.close()


# ----- config validation (no server) ---------------------------------------------------------------------------
def test_config_accepts_both_transports_and_infers_them() -> None:
    stdio = MCPServerConfig.from_dict("calc", {"command": "python", "args": ["s.py"], "env": {"A": "1"}})
    assert (stdio.transport, stdio.command, stdio.args, stdio.env) == ("stdio", "python", ("s.py",), {"A": "1"})
    http = MCPServerConfig.from_dict("web", {"transport": "streamable-http", "url": "https://x/mcp", "headers": {}})
    assert (http.transport, http.url, http.call_timeout) == ("http", "https://x/mcp", 60.0)
    assert http.describe() == "https://x/mcp" and stdio.describe() == "python s.py"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"transport": "stdio"}, "command"),
        ({"transport": "stdio", "command": "python", "args": "s.py"}, "args"),
        ({"transport": "stdio", "command": "python", "env": {"A": 1}}, "env"),
        ({"transport": "http", "url": "ftp://host"}, "url"),
        ({"transport": "http", "url": "http://h/mcp", "headers": ["x"]}, "headers"),
        ({"transport": "http", "url": "http://h/mcp", "command": "python"}, "command"),
        ({"transport": "pigeon", "url": "http://h/mcp"}, "transport"),
        ({"args": ["x"]}, "transport"),
        ({"command": "python", "call_timeout": 0}, "call_timeout"),
        ({"command": "python", "connect_timeout": True}, "connect_timeout"),
        ({"command": "python", "tools": []}, "tools"),
        ({"command": "python", "colour": "blue"}, "colour"),
    ],
)
def test_config_errors_name_the_server_and_the_field(raw: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"MCP server 'calc'.*'{field}'"):
        parse_server_configs({"calc": raw})


def test_server_names_and_the_servers_section_are_checked() -> None:
    with pytest.raises(ValueError, match="non-empty dict"):
        parse_server_configs({})
    with pytest.raises(ValueError, match="non-empty dict"):
        parse_server_configs([{"command": "python"}])
    with pytest.raises(ValueError, match="'a__b'"):
        parse_server_configs({"a__b": {"command": "python"}})
    with pytest.raises(ValueError, match="MCP server 'calc': config must be a dict"):
        parse_server_configs({"calc": "python server.py"})


# ----- result conversion (no server) ---------------------------------------------------------------------------
def test_local_tool_names_avoid_the_group_separator() -> None:
    assert local_tool_name("files.read") == "files_read"
    assert local_tool_name("a__b") == "a_b"
    assert local_tool_name("get-weather_now") == "get-weather_now"
    assert local_tool_name("...") == "_"


def test_call_results_become_tool_results() -> None:
    text = call_result_to_tool_result(
        "add", {"content": [{"type": "text", "text": "5"}], "structuredContent": {"r": 5}}
    )
    assert (text.ok, text.output, text.data) == (True, "5", {"r": 5})
    structured_only = call_result_to_tool_result("ls", {"content": [], "structuredContent": {"result": ["a"]}})
    assert structured_only.output == '{"result": ["a"]}'
    error = call_result_to_tool_result("div", {"content": [{"type": "text", "text": "boom"}], "isError": True})
    assert (error.ok, error.error, error.text) == (False, "boom", "Error: boom")
    silent_error = call_result_to_tool_result("div", {"content": [], "isError": True})
    assert not silent_error.ok and "without a message" in silent_error.error
    media = call_result_to_tool_result(
        "pic",
        {
            "content": [
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///n.txt", "text": "note body"}},
                {"type": "resource_link", "uri": "file:///x", "name": "x"},
            ]
        },
    )
    assert media.output == "[image image/png, 3 bytes]\nnote body\n[resource x at file:///x]"


# ----- a real server over stdio and streamable HTTP ------------------------------------------------------------
@pytest.mark.integration
def test_lists_the_server_tools_as_namespaced_schemas(calc: MCPToolGroup) -> None:
    toolbox = Toolbox()
    toolbox.add_group(calc)
    schemas = {schema["function"]["name"]: schema["function"] for schema in toolbox.schemas()}
    assert {"calc__add", "calc__divide", "calc__save_note", "calc__read_note", "calc__list_notes"} <= set(schemas)
    assert schemas["calc__add"]["description"] == "Add two numbers and return the sum."
    assert schemas["calc__add"]["parameters"] == calc.server_tools["add"]["inputSchema"]
    assert schemas["calc__add"]["parameters"]["required"] == ["a", "b"]


@pytest.mark.integration
def test_a_call_with_good_arguments_returns_the_server_result(calc: MCPToolGroup) -> None:
    result = calc.call("add", {"a": 2, "b": 3.5})
    assert (result.ok, result.output, result.data) == (True, "5.5", {"result": 5.5})
    assert calc.call("save_note", {"title": "shopping", "text": "eggs"}).ok
    assert calc.call("read_note", {"title": "shopping"}).output == "eggs"
    assert calc.call("list_notes", {}).data == {"result": ["shopping"]}


@pytest.mark.integration
def test_a_long_tool_output_is_clipped_like_the_python_tools(calc: MCPToolGroup) -> None:
    # security review #22: a server's output was joined whole into the observation
    assert calc.call("save_note", {"title": "long", "text": "x" * 10_000}).ok
    assert calc.call("read_note", {"title": "long"}).output == "x" * 4000 + "\n... [6000 more characters]"
    short = MCPToolGroup("calc", stdio_config(max_output_chars=50))  # a server of its own: notes stay apart
    try:
        assert short.call("save_note", {"title": "long", "text": "y" * 80}).ok
        assert short.call("read_note", {"title": "long"}).output == "y" * 50 + "\n... [30 more characters]"
    finally:
        short.close()
    with pytest.raises(ValueError, match="field 'max_output_chars' must be a positive integer, got 0"):
        MCPServerConfig.from_dict("calc", stdio_config(max_output_chars=0))


@pytest.mark.integration
def test_bad_arguments_are_rejected_before_reaching_the_server(calc: MCPToolGroup) -> None:
    def received() -> int:
        return calc.call("calls_received", {"tool": "multiply"}).data["result"]

    before = received()
    bad = calc.call("multiply", {"a": "three", "b": 4})
    assert not bad.ok and bad.error.startswith("invalid arguments for 'multiply': a: 'three' is not of type")
    assert not calc.call("multiply", {"a": 3}).ok
    assert received() == before  # neither call was sent
    assert calc.call("multiply", {"a": 3, "b": 4}).output == "12.0"
    assert received() == before + 1  # a valid call is counted, so the check above can fail


@pytest.mark.integration
def test_a_tool_that_raises_on_the_server_gives_a_failed_result(calc: MCPToolGroup) -> None:
    result = calc.call("divide", {"a": 1, "b": 0})
    assert not result.ok and "division by zero" in result.error
    missing = calc.call("read_note", {"title": "nope"})
    assert not missing.ok and "no note titled 'nope'" in missing.error
    assert calc.call("divide", {"a": 1, "b": 4}).output == "0.25"  # the session survives tool errors
    assert calc.connected and calc.ping()


@pytest.mark.integration
@pytest.mark.filterwarnings("error")  # an unclosed loop, transport or pipe would fail the test
def test_timeout_crash_and_close_over_stdio_leave_no_process_behind(child_pids: Callable[[], set[int]]) -> None:
    before, threads_before = child_pids(), set(threading.enumerate())
    group = MCPToolGroup("calc", stdio_config(call_timeout=0.5))
    pid = group.call("pid", {}).data["result"]
    assert pid in child_pids() - before

    slow = group.call("sleep", {"seconds": 1.5})
    assert not slow.ok and slow.error == "tool 'sleep' on MCP server 'calc' timed out after 0.5 s"
    assert group.call("add", {"a": 1, "b": 1}).output == "2.0"  # a timeout does not end the session

    crashed = group.call("crash", {})
    assert not crashed.ok and "lost the connection to MCP server 'calc'" in crashed.error
    after = group.call("add", {"a": 1, "b": 1})
    assert not after.ok and "lost the connection" in after.error
    assert not group.connected

    group.close()
    group.close()  # idempotent
    gc.collect()  # finalizers of anything left open would warn now
    assert not os.path.exists(f"/proc/{pid}")  # exited and reaped, not a zombie
    assert child_pids() == before
    assert set(threading.enumerate()) <= threads_before
    closed = group.call("add", {"a": 1, "b": 1})
    assert not closed.ok and "is closed" in closed.error


@pytest.mark.integration
def test_tools_field_limits_the_registered_tools(mcp_http_url: str) -> None:
    group = MCPToolGroup("calc", {"url": mcp_http_url, "tools": ["add", "divide"]})
    try:
        assert group.get_tool_names() == ["add", "divide"]
    finally:
        group.close()
    with pytest.raises(ToolError, match=r"'tools' names \['cube'\]"):
        MCPToolGroup("calc", {"url": mcp_http_url, "tools": ["add", "cube"]})


@pytest.mark.integration
def test_unreachable_servers_raise_a_connection_error_with_the_reason(closed_port_url: str) -> None:
    with pytest.raises(MCPConnectionError, match=r"could not connect to MCP server 'web' \(http://127.0.0.1:"):
        MCPToolGroup("web", {"url": f"{closed_port_url}/mcp", "connect_timeout": 5})
    with pytest.raises(MCPConnectionError, match="unrecognized arguments: --no-such-flag"):
        MCPToolGroup("calc", stdio_config(args=[str(SERVER_SCRIPT), "--no-such-flag"]))
    with pytest.raises(MCPConnectionError, match="No such file"):
        MCPToolGroup("calc", {"command": "/definitely/not/a/server"})


@pytest.mark.integration
def test_a_group_dropped_without_close_is_closed_by_the_garbage_collector(mcp_http_url: str) -> None:
    group = MCPToolGroup("dropped", {"url": mcp_http_url})
    assert group.call("add", {"a": 1, "b": 1}).ok
    assert any(t.name == "mcp-dropped" for t in threading.enumerate())
    del group
    gc.collect()
    assert not any(t.name == "mcp-dropped" for t in threading.enumerate())
