"""A small example MCP server (calculator + notes) for the `mcp` environment, runnable over stdio or streamable HTTP.

Run it over stdio (the way `MCPEnv` starts it from a `command`):

    python examples/mcp/calculator_server.py

or over streamable HTTP (then point an env at `http://127.0.0.1:8765/mcp`):

    python examples/mcp/calculator_server.py --transport http --port 8765

`--debug-tools` adds `pid`, `sleep`, `crash` and `calls_received`, which the tests use to check process clean-up,
timeouts, a server dying mid-call, and that invalid calls never reach the server. Built with the MCP Python SDK's `MCPServer` (called `FastMCP` before mcp 2.0).
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


class CountingServer(MCPServer):
    """An `MCPServer` that counts every tools/call request it receives, by tool name, before validating it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls_received: Counter[str] = Counter()

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Count the request, then run the tool as usual."""
        self.calls_received[name] += 1
        return await super().call_tool(name, arguments, context)


def build_server(debug_tools: bool = False) -> MCPServer:
    """Build the calculator/notes server; `debug_tools` adds the test-only `pid`, `sleep`, `crash` and
    `calls_received` tools."""
    server_class = CountingServer if debug_tools else MCPServer
    server = server_class("calculator", instructions="Exact arithmetic and a small in-memory notebook.")
    notes: dict[str, str] = {}

    @server.tool()
    def add(a: float, b: float) -> float:
        """Add two numbers and return the sum."""
        return a + b

    @server.tool()
    def multiply(a: float, b: float) -> float:
        """Multiply two numbers and return the product."""
        return a * b

    @server.tool()
    def divide(a: float, b: float) -> float:
        """Divide a by b. Dividing by zero is an error."""
        if b == 0:
            raise ToolError("division by zero")
        return a / b

    @server.tool()
    def save_note(title: str, text: str) -> str:
        """Save a note under a title, replacing any note with the same title."""
        notes[title] = text
        return f"saved note '{title}' ({len(text)} characters)"

    @server.tool()
    def read_note(title: str) -> str:
        """Return the text of the note with this title."""
        if title not in notes:
            raise ToolError(f"no note titled '{title}'; saved titles: {sorted(notes)}")
        return notes[title]

    @server.tool()
    def list_notes() -> list[str]:
        """List the titles of all saved notes."""
        return sorted(notes)

    if debug_tools:

        @server.tool()
        def pid() -> int:
            """Return the server's process id."""
            return os.getpid()

        @server.tool()
        def sleep(seconds: float) -> str:
            """Sleep for some seconds, then answer (blocks the server)."""
            time.sleep(seconds)
            return f"slept {seconds} s"

        @server.tool()
        def crash() -> str:
            """Kill the server process at once, without answering."""
            os._exit(3)

        @server.tool()
        def calls_received(tool: str) -> int:
            """Return how many tools/call requests for this tool name reached the server, rejected ones included."""
            return server.calls_received[tool]

    return server


def main() -> None:
    """Parse the command line and serve until stdin closes (stdio) or the process is stopped (http)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address")
    parser.add_argument("--port", type=int, default=8765, help="HTTP port")
    parser.add_argument("--debug-tools", action="store_true", help="add the pid, sleep and crash tools")
    args = parser.parse_args()
    server = build_server(debug_tools=args.debug_tools)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
