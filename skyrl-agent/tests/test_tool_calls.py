"""Reading tool calls, answers and thinking blocks out of model text."""

from skyrl_agent.tool_calls import find_answer, find_tool_calls, strip_thinking


def test_hermes_blocks_are_read_with_their_arguments():
    text = 'Let me compute.<tool_call>{"name": "calc", "arguments": {"expression": "2*3"}}</tool_call>'
    (call,) = find_tool_calls(text)
    assert (call.name, call.arguments, call.error) == ("calc", {"expression": "2*3"}, None)


def test_several_calls_and_string_arguments():
    text = '<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call><tool_call>{"name": "b"}</tool_call>'
    calls = find_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == [("a", {"x": 1}), ("b", {})]


def test_malformed_and_unclosed_calls_come_back_as_errors():
    (bad,) = find_tool_calls("<tool_call>{calc: 2*3}</tool_call>")
    assert bad.error and "not valid JSON" in bad.error
    (unclosed,) = find_tool_calls('<tool_call>{"name": "calc"')
    assert unclosed.error and "not closed" in unclosed.error
    done, cut = find_tool_calls('<tool_call>{"name": "a"}</tool_call><tool_call>{"name": "b", "argu')
    assert done.name == "a" and done.error is None and "1 <tool_call> block(s) not closed" in cut.error


def test_plain_text_fallback():
    calls = find_tool_calls('Thought: multiply\nAction: calc({"expression": "6*7"})\n')
    assert [(c.name, c.arguments, c.error) for c in calls] == [("calc", {"expression": "6*7"}, None)]
    (bad,) = find_tool_calls("Action: calc(6*7)")
    assert bad.name == "calc" and "not valid JSON" in bad.error


def test_calls_and_answers_inside_thinking_do_not_count():
    text = '<think>maybe <tool_call>{"name": "calc"}</tool_call> or <answer>1</answer></think><answer>42</answer>'
    assert find_tool_calls(text) == []
    assert find_answer(text) == "42"
    assert strip_thinking("a<think>x</think>b<think>unclosed") == "ab"
