"""Tests for tool-call and tag parsing from model text."""

from skyrl_gym.tools import extract_tag, parse_tool_calls


def test_parses_several_tool_calls_including_string_arguments():
    text = (
        'I will look. <tool_call>{"name": "calc__add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
        '<tool_call>\n{"name": "notes__read", "arguments": "{\\"key\\": \\"k\\"}"}\n</tool_call>'
    )
    calls = parse_tool_calls(text)
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("calc__add", {"a": 1, "b": 2}, None),
        ("notes__read", {"key": "k"}, None),
    ]


def test_malformed_tool_calls_carry_an_error():
    calls = parse_tool_calls(
        "<tool_call>{not json}</tool_call><tool_call>[1]</tool_call>"
        '<tool_call>{"name": "f", "arguments": 3}</tool_call>'
    )
    assert "not valid JSON" in calls[0].error
    assert "string 'name'" in calls[1].error
    assert calls[2].name == "f" and "'arguments' must be an object" in calls[2].error
    assert parse_tool_calls("no calls here") == []


def test_extract_tag_last_first_and_missing():
    text = "<sql>SELECT 1</sql> then <sql>\n SELECT 2 \n</sql>"
    assert extract_tag(text, "sql") == "SELECT 2"
    assert extract_tag(text, "sql", last=False) == "SELECT 1"
    assert extract_tag(text, "solution") is None
    assert extract_tag("<a.b>x</a.b>", "a.b") == "x"
