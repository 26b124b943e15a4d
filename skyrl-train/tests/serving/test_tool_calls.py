"""Tool-call blocks in generated text become OpenAI tool calls; malformed blocks stay text."""

import json

from skyrl_train.serving import parse_tool_calls


def test_well_formed_blocks_become_tool_calls_and_leave_the_rest_as_content():
    text = 'Let me look.\n<tool_call>{"name": "search", "arguments": {"q": "ray", "k": 2}}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Let me look."
    assert len(calls) == 1 and calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"]["name"] == "search"
    assert json.loads(calls[0]["function"]["arguments"]) == {"q": "ray", "k": 2}


def test_several_calls_keep_their_order_and_string_arguments_pass_through():
    text = '<tool_call>{"name": "a", "arguments": "{}"}</tool_call><tool_call>{"name": "b"}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "" and [c["function"]["name"] for c in calls] == ["a", "b"]
    assert [c["function"]["arguments"] for c in calls] == ["{}", "{}"]


def test_malformed_blocks_are_not_calls():
    for text in [
        "<tool_call>{not json}</tool_call>",
        '<tool_call>["name"]</tool_call>',
        '<tool_call>{"x": 1}</tool_call>',
    ]:
        assert parse_tool_calls(text) == (text, [])
    assert parse_tool_calls("plain answer") == ("plain answer", [])
