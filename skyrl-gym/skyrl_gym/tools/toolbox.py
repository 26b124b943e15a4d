"""`Toolbox`: the tool groups one env holds, with group-namespaced names and schema-checked calls."""

from __future__ import annotations

from typing import Any

from skyrl_gym.errors import ToolError
from skyrl_gym.tools.core import ToolGroup, ToolResult, ToolSpec

SEPARATOR = "__"


class Toolbox:
    """Tool groups addressed by qualified names `<group>__<tool>`.

    A bare tool name is accepted too when exactly one group has a tool of that name, so text-tag envs can say
    `sql` while chat templates see `sqlite__sql`.
    """

    def __init__(self) -> None:
        self._groups: dict[str, ToolGroup] = {}

    def add_group(self, group: ToolGroup) -> None:
        """Add a group; group names must be unique within the toolbox."""
        if group.name in self._groups:
            raise ToolError(f"a tool group named '{group.name}' is already in this toolbox")
        self._groups[group.name] = group

    @property
    def groups(self) -> list[ToolGroup]:
        """The groups in the order they were added."""
        return list(self._groups.values())

    def qualified_names(self) -> list[str]:
        """Every tool's qualified name `<group>__<tool>`."""
        return [f"{g.name}{SEPARATOR}{t}" for g in self._groups.values() for t in g.get_tool_names()]

    def resolve(self, name: str) -> tuple[ToolGroup, str]:
        """Find the group and unqualified tool name for a qualified or unambiguous bare name."""
        if SEPARATOR in name:
            group_name, tool_name = name.split(SEPARATOR, 1)
            group = self._groups.get(group_name)
            if group is None or tool_name not in group.get_tool_names():
                raise ToolError(f"unknown tool '{name}'; available: {self.qualified_names()}")
            return group, tool_name
        owners = [g for g in self._groups.values() if name in g.get_tool_names()]
        if not owners:
            raise ToolError(f"unknown tool '{name}'; available: {self.qualified_names()}")
        if len(owners) > 1:
            choices = [f"{g.name}{SEPARATOR}{name}" for g in owners]
            raise ToolError(f"tool name '{name}' is ambiguous; use one of {choices}")
        return owners[0], name

    def spec(self, name: str) -> ToolSpec:
        """The spec of a tool by qualified or unambiguous bare name."""
        group, tool_name = self.resolve(name)
        return group.get_tool(tool_name)

    def schemas(self) -> list[dict[str, Any]]:
        """All tools in the OpenAI / chat-template format, under their qualified names."""
        return [
            group.get_tool(t).openai_schema(f"{group.name}{SEPARATOR}{t}")
            for group in self._groups.values()
            for t in group.get_tool_names()
        ]

    def call(self, name: str, arguments: Any) -> ToolResult:
        """Call a tool; an unknown name or bad arguments come back as an `ok=False` result, never an exception."""
        try:
            group, tool_name = self.resolve(name)
        except ToolError as exc:
            return ToolResult(name, False, error=str(exc))
        return group.call(tool_name, arguments)

    def close(self) -> None:
        """Close every group, even if one of them fails; re-raise the first failure."""
        first: Exception | None = None
        for group in self._groups.values():
            try:
                group.close()
            except Exception as exc:  # keep closing the others
                first = first or exc
        if first is not None:
            raise first
