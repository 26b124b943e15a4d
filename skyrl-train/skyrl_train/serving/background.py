"""Run the endpoint's app with uvicorn in a background thread of this process (beside a training run)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn


class BackgroundServer:
    """uvicorn serving `app` on `host:port` from a daemon thread; `start()` returns once it listens."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="skyrl-openai-endpoint", daemon=True)

    @property
    def url(self) -> str:
        """The API base URL, e.g. `http://127.0.0.1:8000/v1`."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> BackgroundServer:
        """Start serving; raises naming the address when the server does not come up (e.g. the port is taken)."""
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"generator.http_endpoint: could not serve on {self.host}:{self.port} (is the port in use? set "
                    "generator.http_endpoint.port)"
                )
            time.sleep(0.05)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask uvicorn to exit and wait for the thread."""
        self.server.should_exit = True
        self.thread.join(timeout=timeout_s)
