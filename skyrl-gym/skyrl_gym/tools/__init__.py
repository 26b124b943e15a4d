"""Tools for environments: `@tool`, `ToolGroup`, `Toolbox` and tool-call parsing."""

from skyrl_gym.tools.core import ToolGroup, ToolResult, ToolSpec, tool
from skyrl_gym.tools.parsing import ParsedToolCall, extract_tag, parse_tool_calls
from skyrl_gym.tools.toolbox import Toolbox

__all__ = [
    "ToolGroup",
    "ToolResult",
    "ToolSpec",
    "Toolbox",
    "tool",
    "ParsedToolCall",
    "parse_tool_calls",
    "extract_tag",
]
