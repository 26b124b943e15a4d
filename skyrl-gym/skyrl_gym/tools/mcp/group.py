"""`MCPToolGroup`: a `ToolGroup` whose tools are the tools one MCP server lists, called over the MCP connection."""

from __future__ import annotations

import json
import re
import weakref
from typing import Any, Union

import jsonschema

from skyrl_gym.errors import ToolError
from skyrl_gym.tools.core import ToolGroup, ToolResult, ToolSpec
from skyrl_gym.tools.mcp.config import DEFAULT_MAX_OUTPUT_CHARS, MCPServerConfig
from skyrl_gym.tools.mcp.connection import MCPCallError, MCPConnection
from skyrl_gym.tools.python import clip_text


class MCPToolGroup(ToolGroup):
    """The tools of one MCP server, registered under the group `name` (so they read `<name>__<tool>`).

    `config` is an `MCPServerConfig` or its dict form (`{"transport": "stdio", "command": ..., "args": [...]}` or
    `{"transport": "http", "url": ...}`). Building the group connects (unless `connect=False`; call `connect()`
    later) and registers every listed tool with the server's `inputSchema` as its JSON schema, so `ToolGroup.call`
    rejects bad arguments before they reach the server. A server tool name that is not a valid local name (dots,
    `__`) is registered with those characters replaced by `_`.

    A call's text content (or, without text, its structured content as JSON) becomes the `ToolResult` output, cut to
    the server's `max_output_chars` like the python tool's; a result with `isError`, a timeout or a lost connection
    becomes an `ok=False` result with the reason. Call `close`
    (or close the toolbox / env holding the group) to end the session and stop a stdio server's process.
    """

    def __init__(self, name: str, config: Union[MCPServerConfig, dict[str, Any]], connect: bool = True) -> None:
        super().__init__(name)
        self.config = MCPServerConfig.from_dict(name, config)
        self.server_tools: dict[str, dict[str, Any]] = {}  # local tool name -> the server's tool listing
        self._connection: MCPConnection | None = None
        if connect:
            self.connect()

    def connect(self) -> None:
        """Open the session and register the server's tools; raises `MCPConnectionError` when the server is down."""
        if self._connection is not None:
            raise ToolError(f"MCP tool group '{self.name}' is already connected; make a new group to reconnect")
        connection = MCPConnection(self.name, self.config)
        listings = connection.open()
        self._connection = connection
        # A group dropped without close() (or still open at exit) must not leave its thread and server running.
        weakref.finalize(self, connection.close)
        try:
            self._register(listings)
        except Exception:
            connection.close()
            raise

    @property
    def connected(self) -> bool:
        """True while the session with the server is up."""
        return self._connection is not None and self._connection.alive

    def ping(self, timeout: float = 5.0) -> bool:
        """True when the server answers a ping within `timeout` seconds."""
        return self._connection is not None and self._connection.ping(timeout)

    def close(self) -> None:
        """End the session and stop the server process (stdio). Safe to call more than once."""
        if self._connection is not None:
            self._connection.close()

    def _register(self, listings: list[dict[str, Any]]) -> None:
        wanted = set(self.config.tools) if self.config.tools is not None else None
        listed = {listing.get("name") for listing in listings}
        if wanted is not None and wanted - listed:
            raise ToolError(
                f"MCP server '{self.name}': field 'tools' names {sorted(wanted - listed)}, which the server does not "
                f"list; it lists {sorted(n for n in listed if isinstance(n, str))}"
            )
        for listing in listings:
            server_name = listing.get("name")
            if not isinstance(server_name, str) or (wanted is not None and server_name not in wanted):
                continue
            local = local_tool_name(server_name)
            if local in self.server_tools:
                raise ToolError(
                    f"MCP server '{self.name}': tools '{self.server_tools[local]['name']}' and '{server_name}' both "
                    f"map to the local name '{local}'; list only one of them in the server's 'tools' field"
                )
            schema = listing.get("inputSchema") or {"type": "object", "properties": {}}
            try:
                jsonschema.Draft202012Validator.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise ToolError(
                    f"MCP server '{self.name}': tool '{server_name}' has an invalid inputSchema ({exc.message}); "
                    "leave it out with the server's 'tools' field"
                ) from None
            description = listing.get("description") or listing.get("title") or f"The '{server_name}' tool."
            self.add_tool(ToolSpec(local, description, schema, self._remote_caller(server_name, local)))
            self.server_tools[local] = listing

    def _remote_caller(self, server_name: str, local_name: str) -> Any:
        def call_remote(**arguments: Any) -> ToolResult:
            return self._call_remote(server_name, local_name, arguments)

        call_remote.__name__ = local_name
        return call_remote

    def _call_remote(self, server_name: str, local_name: str, arguments: dict[str, Any]) -> ToolResult:
        if self._connection is None:
            return ToolResult(local_name, False, error=f"MCP tool group '{self.name}' is not connected")
        try:
            result = self._connection.call_tool(server_name, arguments)
        except MCPCallError as exc:
            return ToolResult(local_name, False, error=str(exc))
        return call_result_to_tool_result(local_name, result, self.config.max_output_chars)


_INVALID_NAME_CHARS = re.compile(r"[^0-9A-Za-z_-]+")


def local_tool_name(server_name: str) -> str:
    """The name a server tool gets in the group: characters other than letters, digits, `_`, `-` become `_`, and
    runs of `_` shrink to one (the toolbox reserves `__` as the group separator)."""
    name = re.sub(r"_{2,}", "_", _INVALID_NAME_CHARS.sub("_", server_name))
    return name or "tool"


def call_result_to_tool_result(
    name: str, result: dict[str, Any], max_chars: int = DEFAULT_MAX_OUTPUT_CHARS
) -> ToolResult:
    """Turn a `CallToolResult` (camelCase dict) into a `ToolResult`: text blocks joined by newlines (structured content
    as JSON when there is no text) and cut to `max_chars`, `isError` as `ok=False`; `data` keeps the structured
    content."""
    text = "\n".join(filter(None, (render_content_block(block) for block in result.get("content") or [])))
    structured = result.get("structuredContent")
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    text = clip_text(text, max_chars)
    if result.get("isError"):
        return ToolResult(name, False, error=text or "the tool reported an error without a message", data=structured)
    return ToolResult(name, True, output=text, data=structured)


def render_content_block(block: dict[str, Any]) -> str:
    """Render one MCP content block as text for the model; non-text media become a short placeholder."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        size = len(block.get("data") or "") * 3 // 4
        return f"[{kind} {block.get('mimeType', 'unknown type')}, {size} bytes]"
    if kind == "resource_link":
        label = f" {block['name']}" if block.get("name") else ""
        return f"[resource{label} at {block.get('uri')}]"
    if kind == "resource":
        resource = block.get("resource") or {}
        if "text" in resource:
            return str(resource["text"])
        return f"[binary resource {resource.get('uri')} ({resource.get('mimeType', 'unknown type')})]"
    return json.dumps(block, ensure_ascii=False)
