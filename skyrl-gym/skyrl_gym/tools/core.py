"""Tools for environments: the `@tool` decorator, `ToolGroup`, and the `ToolResult` a call returns."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import jsonschema

from skyrl_gym.errors import ToolError
from skyrl_gym.tools.schema import function_schema


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call. `ok=False` carries a human-readable `error` for the model to read.

    `service_error=True` marks a failure of the service behind the tool (a retrieval server that is down or answers
    with an HTTP error, a sandbox that cannot start), as opposed to a failure the call itself caused; an env may turn
    it into a failed step instead of showing it to the model.
    """

    name: str
    ok: bool
    output: str = ""
    error: Optional[str] = None
    data: Any = None
    service_error: bool = False

    @property
    def text(self) -> str:
        """The text to show the model: the output, or `Error: ...`."""
        return self.output if self.ok else f"Error: {self.error}"


@dataclass
class ToolSpec:
    """A tool's public description: name, description and JSON schema of its parameters."""

    name: str
    description: str
    parameters: dict[str, Any]
    func: Callable[..., Any] = field(repr=False)

    def openai_schema(self, name: Optional[str] = None) -> dict[str, Any]:
        """The tool in the OpenAI / Hugging Face chat-template format (`{"type": "function", "function": ...}`)."""
        return {
            "type": "function",
            "function": {"name": name or self.name, "description": self.description, "parameters": self.parameters},
        }


_TOOL_ATTR = "__skyrl_tool__"


def tool(func: Optional[Callable[..., Any]] = None, *, name: Optional[str] = None, description: Optional[str] = None):
    """Mark a `ToolGroup` method as a tool. Use as `@tool` or `@tool(name=..., description=...)`.

    The parameters' JSON schema comes from the signature and type hints; the description from the docstring's first
    paragraph; each parameter's description from its `Args:` entry.
    """

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, _TOOL_ATTR, {"name": name or fn.__name__, "description": description})
        return fn

    return mark(func) if func is not None else mark


def _validate_name(name: str, what: str) -> None:
    if not name or not all(ch.isalnum() or ch in "_-" for ch in name) or "__" in name:
        raise ToolError(f"{what} '{name}' must be non-empty letters, digits, '_' or '-', without '__'")


class ToolGroup:
    """A named set of related tools, discovered from the `@tool` methods of a subclass.

    Subclasses may hold state (a database path, an HTTP client) and release it in `close`. Tools can also be added
    at run time with `add_tool` (this is how MCP servers' tools arrive).
    """

    def __init__(self, name: str) -> None:
        _validate_name(name, "tool group name")
        self.name = name
        self._specs: dict[str, ToolSpec] = {}
        for attr_name, member in inspect.getmembers(type(self), predicate=callable):
            marker = getattr(member, _TOOL_ATTR, None)
            if marker is None:
                continue
            tool_name = marker["name"]
            desc, params = function_schema(member, tool_name, skip_first=True)
            self.add_tool(ToolSpec(tool_name, marker["description"] or desc, params, getattr(self, attr_name)))

    def add_tool(self, spec: ToolSpec) -> None:
        """Add one tool; its name must be unique within the group."""
        _validate_name(spec.name, f"tool name in group '{self.name}'")
        if spec.name in self._specs:
            raise ToolError(f"tool group '{self.name}' already has a tool named '{spec.name}'")
        jsonschema.Draft202012Validator.check_schema(spec.parameters)
        self._specs[spec.name] = spec

    def get_tool_names(self) -> list[str]:
        """The group's tool names, unqualified."""
        return list(self._specs)

    def get_tool(self, name: str) -> ToolSpec:
        """The spec of one tool by its unqualified name."""
        if name not in self._specs:
            raise ToolError(f"tool group '{self.name}' has no tool '{name}'; it has {self.get_tool_names()}")
        return self._specs[name]

    def call(self, name: str, arguments: Any) -> ToolResult:
        """Validate `arguments` against the tool's schema and run it; failures come back as `ok=False` results."""
        if name not in self._specs:
            return ToolResult(name, False, error=f"unknown tool '{name}'; available: {self.get_tool_names()}")
        spec = self._specs[name]
        if not isinstance(arguments, dict):
            return ToolResult(name, False, error=f"arguments must be a JSON object, got {type(arguments).__name__}")
        problem = _schema_problem(arguments, spec.parameters)
        if problem:
            return ToolResult(name, False, error=f"invalid arguments for '{name}': {problem}")
        try:
            value = spec.func(**arguments)
        except Exception as exc:  # a tool's failure is information for the model, not a crash of the episode
            return ToolResult(name, False, error=f"{type(exc).__name__}: {exc}")
        if isinstance(value, ToolResult):
            return value
        return ToolResult(name, True, output=value if isinstance(value, str) else _to_text(value), data=value)

    def close(self) -> None:
        """Release the group's resources; the default holds none."""


def _schema_problem(arguments: dict[str, Any], schema: dict[str, Any]) -> Optional[str]:
    """Return a one-line description of the first schema violation, or None."""
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
    if not errors:
        return None
    error = errors[0]
    location = ".".join(str(part) for part in error.path)
    return f"{location}: {error.message}" if location else error.message


def _to_text(value: Any) -> str:
    import json

    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
