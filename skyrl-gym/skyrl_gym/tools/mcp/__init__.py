"""MCP tools: connect to Model Context Protocol servers (stdio or streamable HTTP) and expose their tools as a
`ToolGroup`."""

from skyrl_gym.tools.mcp.config import MCPServerConfig, parse_server_configs
from skyrl_gym.tools.mcp.connection import MCPCallError, MCPConnection, MCPConnectionError
from skyrl_gym.tools.mcp.group import MCPToolGroup, call_result_to_tool_result, local_tool_name

__all__ = [
    "MCPServerConfig",
    "parse_server_configs",
    "MCPConnection",
    "MCPConnectionError",
    "MCPCallError",
    "MCPToolGroup",
    "call_result_to_tool_result",
    "local_tool_name",
]
