"""Reading actions out of model text: Hermes/Qwen `<tool_call>{json}</tool_call>` blocks, a plain-text fallback
(`Action: name({"arg": ...})`), `<answer>...</answer>`, and `<think>...</think>` handling."""

from __future__ import annotations

import json
import re
from typing import Optional

from skyrl_gym.tools.parsing import ParsedToolCall, extract_tag, parse_tool_calls

_PLAIN_CALL = re.compile(r"^\s*Action:\s*([A-Za-z_][\w-]*)\s*\((.*)\)\s*$", re.MULTILINE)
_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


def find_tool_calls(text: str) -> list[ParsedToolCall]:
    """The tool calls in `text`: `<tool_call>` blocks when there are any, else `Action: name({...})` lines. A call
    that cannot be read comes back with `error` set (it becomes an error observation, never an exception)."""
    visible = strip_thinking(text)
    calls = parse_tool_calls(visible)
    opened = visible.count("<tool_call>")
    if opened:
        unclosed = opened - len(calls)
        if unclosed > 0:  # e.g. the turn ran out of tokens inside a call: say so rather than drop it
            calls.append(ParsedToolCall("", {}, f"{unclosed} <tool_call> block(s) not closed with </tool_call>"))
        return calls
    found = []
    for match in _PLAIN_CALL.finditer(visible):
        name, body = match.group(1), match.group(2).strip()
        try:
            arguments = json.loads(body) if body else {}
        except json.JSONDecodeError as exc:
            found.append(ParsedToolCall(name, {}, f"Action {name}: arguments are not valid JSON ({exc.msg})"))
            continue
        if not isinstance(arguments, dict):
            found.append(ParsedToolCall(name, {}, f"Action {name}: arguments must be a JSON object"))
            continue
        found.append(ParsedToolCall(name, arguments))
    return found


def find_answer(text: str) -> Optional[str]:
    """The content of the last `<answer>...</answer>` outside thinking blocks, or None."""
    return extract_tag(strip_thinking(text), "answer")


def strip_thinking(text: str) -> str:
    """`text` without its `<think>...</think>` blocks (an unclosed one hides everything after it)."""
    text = _THINK.sub("", text)
    at = text.find("<think>")
    return text if at == -1 else text[:at]
