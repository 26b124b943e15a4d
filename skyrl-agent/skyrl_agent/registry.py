"""Agents, tasks and tool groups by name: `@register_agent("name")`, `@register_task("name")`,
`@register_tool_group("name")`. The config names them (`agent_cls`, `task`, `tools`)."""

from __future__ import annotations

from skyrl_train.utils.registry import Registry

AGENTS = Registry("agent", '@register_agent("name")')
"""Agent name -> `BaseAgent` subclass."""
TASKS = Registry("task", '@register_task("name")')
"""Task name -> `Task` subclass (built with the config's `task_args`)."""
TOOL_GROUPS = Registry("tool group", '@register_tool_group("name")')
"""Tool group name -> a no-argument callable returning a `skyrl_gym` `ToolGroup`."""


def register_agent(name: str, *, builtin: bool = False):
    """Class decorator registering an agent (`agent_cls: name`)."""
    return AGENTS.register(name, builtin=builtin)


def register_task(name: str, *, builtin: bool = False):
    """Class decorator registering a task (`task: name`)."""
    return TASKS.register(name, builtin=builtin)


def register_tool_group(name: str, *, builtin: bool = False):
    """Decorator registering a tool-group factory (`tools: [name]`)."""
    return TOOL_GROUPS.register(name, builtin=builtin)


def load_builtins() -> None:
    """Import the modules that register the built-in agents, tasks and tool groups."""
    import skyrl_agent.agents  # noqa: F401
    import skyrl_agent.tasks  # noqa: F401
