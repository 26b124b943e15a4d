"""Parse tool calls out of model text: `<tool_call>{json}</tool_call>` blocks and simple `<tag>...</tag>` calls."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Optional

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ParsedToolCall:
    """One tool call found in model text; `error` is set (and name/arguments may be empty) when it is malformed."""

    name: str
    arguments: dict[str, Any]
    error: Optional[str] = None


def parse_tool_calls(text: str) -> list[ParsedToolCall]:
    """Find every `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block (Hermes / Qwen format)."""
    calls: list[ParsedToolCall] = []
    for index, match in enumerate(_TOOL_CALL.finditer(text)):
        body = match.group(1)
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as exc:
            calls.append(ParsedToolCall("", {}, f"tool call {index} is not valid JSON ({exc.msg} at char {exc.pos})"))
            continue
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            calls.append(ParsedToolCall("", {}, f"tool call {index} must be an object with a string 'name'"))
            continue
        arguments = payload.get("arguments", {})
        if isinstance(arguments, str):  # some models emit the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                calls.append(ParsedToolCall(payload["name"], {}, f"tool call {index}: 'arguments' is not valid JSON"))
                continue
        if not isinstance(arguments, dict):
            calls.append(ParsedToolCall(payload["name"], {}, f"tool call {index}: 'arguments' must be an object"))
            continue
        calls.append(ParsedToolCall(payload["name"], arguments))
    return calls


@functools.lru_cache(maxsize=256)
def _tag_pattern(tag: str) -> re.Pattern:
    return re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL)


def extract_tag(text: str, tag: str, last: bool = True) -> Optional[str]:
    """Return the stripped content of the last (or first) `<tag>...</tag>` block, or None if there is none."""
    matches = _tag_pattern(tag).findall(text)
    if not matches:
        return None
    return (matches[-1] if last else matches[0]).strip()
