"""Tests for the Toolbox: namespaced names, ambiguity, schemas and closing."""

from skyrl_gym.tools import Toolbox, ToolGroup, tool


class Maths(ToolGroup):
    def __init__(self, name="maths"):
        super().__init__(name)
        self.closed = False

    @tool
    def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    def close(self):
        self.closed = True


class Strings(ToolGroup):
    def __init__(self):
        super().__init__("strings")

    @tool
    def add(self, a: str, b: str) -> str:
        """Concatenate two strings."""
        return a + b

    @tool
    def upper(self, s: str) -> str:
        """Upper-case a string."""
        return s.upper()


def test_names_are_namespaced_and_bare_names_resolve_when_unique():
    box = Toolbox()
    box.add_group(Maths())
    box.add_group(Strings())
    assert box.qualified_names() == ["maths__add", "strings__add", "strings__upper"]
    assert box.call("maths__add", {"a": 1, "b": 2}).output == "3"
    assert box.call("strings__add", {"a": "x", "b": "y"}).output == "xy"
    assert box.call("upper", {"s": "ok"}).output == "OK"
    ambiguous = box.call("add", {"a": 1, "b": 2})
    assert not ambiguous.ok and "ambiguous" in ambiguous.error and "maths__add" in ambiguous.error
    unknown = box.call("maths__mul", {})
    assert not unknown.ok and "unknown tool 'maths__mul'" in unknown.error


def test_schemas_use_qualified_names():
    box = Toolbox()
    box.add_group(Maths())
    (schema,) = box.schemas()
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "maths__add"
    assert schema["function"]["parameters"]["required"] == ["a", "b"]


def test_duplicate_group_names_are_rejected_and_close_reaches_every_group():
    import pytest

    from skyrl_gym import ToolError

    box = Toolbox()
    first, second = Maths("one"), Maths("two")
    box.add_group(first)
    box.add_group(second)
    with pytest.raises(ToolError, match="already in this toolbox"):
        box.add_group(Maths("one"))
    box.close()
    assert first.closed and second.closed
