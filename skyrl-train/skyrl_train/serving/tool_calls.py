"""Tool calls in generated text: Hermes/Qwen-style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks
become OpenAI `tool_calls`; the text outside the blocks stays the message content."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """`(content, tool_calls)`: every well-formed block as an OpenAI tool call (arguments as a JSON string), and the
    text with those blocks removed. A block that is not a JSON object with a string `name` stays in the content."""
    calls: list[dict[str, Any]] = []

    def take(match: re.Match) -> str:
        try:
            payload = json.loads(match.group(1))
        except json.JSONDecodeError:
            return match.group(0)
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            return match.group(0)
        arguments = payload.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": payload["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
        return ""

    content = TOOL_CALL.sub(take, text)
    return content.strip() if calls else content, calls
