"""Validate the description of one MCP server (stdio command or streamable-HTTP URL) into an `MCPServerConfig`."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

Transport = Literal["stdio", "http"]

_TRANSPORT_ALIASES: dict[str, Transport] = {
    "stdio": "stdio",
    "http": "http",
    "streamable_http": "http",
    "streamable-http": "http",
}
_COMMON_FIELDS = ("transport", "connect_timeout", "call_timeout", "tools", "max_output_chars")
DEFAULT_MAX_OUTPUT_CHARS = 4000
"""Cap on the text of one tool result the model sees (as the python tool's)."""
_STDIO_FIELDS = ("command", "args", "env", "cwd")
_HTTP_FIELDS = ("url", "headers")


@dataclass(frozen=True)
class MCPServerConfig:
    """How to reach one MCP server.

    `transport="stdio"` starts `command` with `args` (plus `env` merged over a minimal safe environment, in `cwd`)
    and talks JSON-RPC over its stdin/stdout; `transport="http"` connects to a streamable-HTTP endpoint `url`
    (e.g. `http://127.0.0.1:8765/mcp`) sending `headers` with every request. `connect_timeout` bounds the start-up
    handshake and `call_timeout` each tool call, in seconds. `tools`, when given, lists the server's tool names to
    expose (all of them otherwise). `max_output_chars` caps the text of one tool result (the rest is cut, saying how
    much): a server's output is not ours to trust either.
    """

    transport: Transport
    command: Optional[str] = None
    args: tuple[str, ...] = ()
    env: Optional[dict[str, str]] = None
    cwd: Optional[str] = None
    url: Optional[str] = None
    headers: dict[str, str] = field(default_factory=dict)
    connect_timeout: float = 30.0
    call_timeout: float = 60.0
    tools: Optional[tuple[str, ...]] = None
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS

    @classmethod
    def from_dict(cls, server: str, raw: Any) -> MCPServerConfig:
        """Validate one server's config dict; a problem raises ValueError naming the server and the field."""
        if isinstance(raw, MCPServerConfig):
            return raw
        if not isinstance(raw, Mapping):
            raise ValueError(f"MCP server '{server}': config must be a dict, got {type(raw).__name__}")
        transport = _transport(server, raw)
        allowed = _COMMON_FIELDS + (_STDIO_FIELDS if transport == "stdio" else _HTTP_FIELDS)
        for key in raw:
            if key not in allowed:
                hint = ""
                if key in _STDIO_FIELDS + _HTTP_FIELDS:
                    hint = f" (it belongs to the other transport; this server's transport is '{transport}')"
                raise ValueError(
                    f"MCP server '{server}': unknown field '{key}'{hint}; allowed fields: {', '.join(allowed)}"
                )
        common = {
            "connect_timeout": _positive_number(server, raw, "connect_timeout", cls.connect_timeout),
            "call_timeout": _positive_number(server, raw, "call_timeout", cls.call_timeout),
            "tools": _optional_names(server, raw, "tools"),
            "max_output_chars": _positive_int(server, raw, "max_output_chars", cls.max_output_chars),
        }
        if transport == "stdio":
            command = raw.get("command")
            if not isinstance(command, str) or not command.strip():
                raise ValueError(f"MCP server '{server}': field 'command' must be a non-empty string, got {command!r}")
            args = raw.get("args", [])
            if not _is_list(args) or not all(isinstance(a, str) for a in args):
                raise ValueError(f"MCP server '{server}': field 'args' must be a list of strings, got {args!r}")
            cwd = raw.get("cwd")
            if cwd is not None and (not isinstance(cwd, str) or not cwd):
                raise ValueError(f"MCP server '{server}': field 'cwd' must be a directory path string, got {cwd!r}")
            env = _string_map(server, raw, "env") if raw.get("env") is not None else None
            return cls("stdio", command=command, args=tuple(args), env=env, cwd=cwd, **common)
        url = raw.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server '{server}': field 'url' must be an http:// or https:// URL, got {url!r}")
        return cls("http", url=url, headers=_string_map(server, raw, "headers"), **common)

    def describe(self) -> str:
        """A short human-readable address of the server: its command line or its URL."""
        if self.transport == "stdio":
            return " ".join([self.command or "", *self.args]).strip()
        return self.url or ""


def parse_server_configs(raw: Any) -> dict[str, MCPServerConfig]:
    """Validate a `{server_name: config}` mapping (the env's `servers` section) into `MCPServerConfig`s."""
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(
            "MCP env_config 'servers' must be a non-empty dict of {name: {transport, ...}}, "
            f"got {type(raw).__name__ if not isinstance(raw, Mapping) else 'an empty dict'}"
        )
    configs: dict[str, MCPServerConfig] = {}
    for name, server in raw.items():
        if not isinstance(name, str) or not name or "__" in name or not all(c.isalnum() or c in "_-" for c in name):
            raise ValueError(
                f"MCP server name {name!r} must be non-empty letters, digits, '_' or '-' without '__' "
                "(it prefixes the tool names)"
            )
        configs[name] = MCPServerConfig.from_dict(name, server)
    return configs


def _transport(server: str, raw: dict[str, Any]) -> Transport:
    value = raw.get("transport")
    if value is None:  # infer it from the address given
        if "command" in raw and "url" not in raw:
            return "stdio"
        if "url" in raw and "command" not in raw:
            return "http"
        raise ValueError(
            f"MCP server '{server}': field 'transport' is missing; give 'stdio' (with 'command') or 'http' (with 'url')"
        )
    if not isinstance(value, str) or value.lower() not in _TRANSPORT_ALIASES:
        raise ValueError(f"MCP server '{server}': field 'transport' must be 'stdio' or 'http', got {value!r}")
    return _TRANSPORT_ALIASES[value.lower()]


def _positive_number(server: str, raw: dict[str, Any], key: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"MCP server '{server}': field '{key}' must be a positive number of seconds, got {value!r}")
    return float(value)


def _positive_int(server: str, raw: dict[str, Any], key: str, default: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"MCP server '{server}': field '{key}' must be a positive integer, got {value!r}")
    return value


def _optional_names(server: str, raw: dict[str, Any], key: str) -> Optional[tuple[str, ...]]:
    value = raw.get(key)
    if value is None:
        return None
    if not _is_list(value) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"MCP server '{server}': field '{key}' must be a non-empty list of tool names, got {value!r}")
    return tuple(value)


def _string_map(server: str, raw: dict[str, Any], key: str) -> dict[str, str]:
    value = raw.get(key) or {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"MCP server '{server}': field '{key}' must be a dict of string to string, got {value!r}")
    return dict(value)


def _is_list(value: Any) -> bool:
    """A list-like of items (lists, tuples, OmegaConf ListConfig), but not a string."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))
