"""Listening sockets for the HTTP servers the CLIs start.

A server that loads models before it listens leaves its port free for minutes: a clash is then reported only at the
end, and meanwhile any process on the machine (Ray, vLLM, torch.distributed all bind ports) may take it. The CLIs
bind first with `listen_socket` and hand the socket to uvicorn with `serve_on`. `spare_port` picks a port for a
server started later (tests, examples) outside the range the OS hands out for `bind(port=0)`.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Any

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
SPARE_PORTS_FLOOR = 20000
"""Spare ports are drawn above this: Ray's worker ports are 10002-19999 by default."""
_draw = random.SystemRandom()


def listen_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to `host:port` and listening; SystemExit naming the address when it cannot be had."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise SystemExit(f"--host {host}: cannot listen there: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT does not block it
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise SystemExit(f"--port {port}: cannot listen on {host}:{port} ({exc}); pick a free port") from exc
    return sock


def serve_on(app: Any, sock: socket.socket, log_level: str = "warning") -> None:
    """Run uvicorn on an already listening socket until interrupted."""
    import uvicorn

    uvicorn.Server(uvicorn.Config(app, log_level=log_level)).run(sockets=[sock])


def ephemeral_range() -> tuple[int, int]:
    """The OS's range for `bind(port=0)` and outgoing connections (Linux default 32768-60999)."""
    try:
        low, high = EPHEMERAL_RANGE_FILE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def spare_port(host: str = "127.0.0.1", attempts: int = 200) -> int:
    """A port free now that no `bind(port=0)` will be given before the caller binds it: drawn below the ephemeral
    range (or above it when there is no room below), falling back to one the OS picks."""
    low, high = ephemeral_range()
    below, above = range(SPARE_PORTS_FLOOR, low), range(high + 1, 65536)
    candidates = below if len(below) >= 1000 else above if len(above) >= 1000 else range(0)
    for _ in range(attempts if candidates else 0):
        port = _draw.choice(candidates)  # not the seeded global generator: two seeded runs would collide
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
