"""Tests for @tool, ToolGroup and the JSON schemas derived from signatures and docstrings."""

from typing import Literal, Optional

import pytest

from skyrl_gym import ToolError
from skyrl_gym.tools import ToolGroup, ToolResult, tool


class Notes(ToolGroup):
    """A stateful group: notes kept in memory."""

    def __init__(self):
        super().__init__("notes")
        self.notes: dict[str, str] = {}
        self.closed = False

    @tool
    def write(self, key: str, text: str, tags: Optional[list[str]] = None) -> str:
        """Store a note under a key.

        Args:
            key: Name of the note.
            text: What to store; replaces
                any earlier text.
            tags: Optional labels.
        """
        self.notes[key] = text
        return f"stored {key}"

    @tool(name="read", description="Read a note back.")
    def read_note(self, key: str, mode: Literal["full", "head"] = "full") -> str:
        """Ignored because the decorator gives a description."""
        text = self.notes[key]
        return text if mode == "full" else text[:3]

    @tool
    def count(self, scale: float = 1.0) -> dict:
        """Count the notes."""
        return {"count": len(self.notes) * scale}

    def close(self):
        self.closed = True


def test_schema_from_signature_types_defaults_and_docstring():
    group = Notes()
    assert sorted(group.get_tool_names()) == ["count", "read", "write"]
    spec = group.get_tool("write")
    assert spec.description == "Store a note under a key."
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "key": {"type": "string", "description": "Name of the note."},
            "text": {"type": "string", "description": "What to store; replaces any earlier text."},
            "tags": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "description": "Optional labels.",
                "default": None,
            },
        },
        "additionalProperties": False,
        "required": ["key", "text"],
    }
    read = group.get_tool("read")
    assert read.description == "Read a note back."
    assert read.parameters["properties"]["mode"] == {"enum": ["full", "head"], "default": "full"}
    assert read.openai_schema("notes__read")["function"]["name"] == "notes__read"


def test_calls_are_validated_and_failures_are_results():
    group = Notes()
    assert group.call("write", {"key": "a", "text": "hello"}) == ToolResult("write", True, "stored a", data="stored a")
    assert group.call("read", {"key": "a", "mode": "head"}).output == "hel"
    bad_enum = group.call("read", {"key": "a", "mode": "tail"})
    assert not bad_enum.ok and "mode" in bad_enum.error and "'tail' is not one of" in bad_enum.error
    missing = group.call("write", {"key": "a"})
    assert not missing.ok and "'text' is a required property" in missing.error
    extra = group.call("write", {"key": "a", "text": "x", "colour": "red"})
    assert not extra.ok and "colour" in extra.error
    wrong_type = group.call("count", {"scale": "2"})
    assert not wrong_type.ok and "scale: '2' is not of type 'number'" in wrong_type.error
    assert group.call("count", {"scale": 2}).output == '{"count": 2}'  # ints are valid numbers
    raised = group.call("read", {"key": "nope"})
    assert not raised.ok and raised.error == "KeyError: 'nope'" and raised.text == "Error: KeyError: 'nope'"
    not_object = group.call("count", [1])
    assert not not_object.ok and "must be a JSON object, got list" in not_object.error
    unknown = group.call("erase", {})
    assert not unknown.ok and "unknown tool 'erase'" in unknown.error


def test_declaration_errors_are_clear():
    class NoDoc(ToolGroup):
        @tool
        def f(self, x: int) -> int:
            return x

    with pytest.raises(ToolError, match="tool 'f' needs a docstring"):
        NoDoc("g")

    class VarArgs(ToolGroup):
        @tool
        def f(self, *xs: int) -> int:
            """Sum."""
            return sum(xs)

    with pytest.raises(ToolError, match=r"\*args/\*\*kwargs"):
        VarArgs("g")

    class BadHint(ToolGroup):
        @tool
        def f(self, x: object) -> int:
            """Use x."""
            return 1

    with pytest.raises(ToolError, match="parameter 'x': type hint"):
        BadHint("g")

    with pytest.raises(ToolError, match="without '__'"):
        ToolGroup("bad__name")
