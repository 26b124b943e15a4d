"""Run `skyrl-tx serve` as a subprocess on 127.0.0.1 (tests, benchmarks and examples use it)."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import httpx

from skyrl_train.serving.listen import spare_port


def free_port() -> int:
    """A TCP port nothing listens on right now, outside the range other processes' `bind(port=0)` draws from (so Ray
    or vLLM starting meanwhile cannot take it before the server binds it)."""
    return spare_port("127.0.0.1")


def log_tail(path: Optional[Path], lines: int = 40) -> str:
    """The last `lines` lines of a server log ('' when there is none)."""
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class LocalServer:
    """A `skyrl-tx serve` subprocess on 127.0.0.1 with its data folder; `restart()` starts a new process on the same
    folder and port. It accepts `api_keys` (passed in `$SKYRL_TX_API_KEYS`, not on the command line); none given: one
    random key, `api_key`. With `dev_mode` it is given no key and `api_key` is the one the server generated."""

    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    process: Optional[subprocess.Popen] = None
    log_path: Optional[Path] = None
    api_keys: tuple[str, ...] = ()
    dev_mode: bool = False

    def __post_init__(self) -> None:
        if not self.api_keys and not self.dev_mode:
            self.api_keys = (f"tml-local-{secrets.token_hex(8)}",)

    @property
    def url(self) -> str:
        """The base URL clients use."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_key(self) -> str:
        """The first accepted key."""
        return self.api_keys[0]

    def start(self, timeout_s: float = 900.0) -> None:
        """Start and wait until /healthz answers (the first start may build the embedded model)."""
        self.log_path = self.data_dir / f"server-{int(time.time() * 1000)}.log"
        command = [sys.executable, "-m", "skyrl_tx", "serve", "--port", str(self.port)]
        command += ["--checkpoint-dir", str(self.data_dir), *self.extra_args]
        environment = {**os.environ, "SKYRL_TX_API_KEYS": "" if self.dev_mode else ",".join(self.api_keys)}
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"skyrl-tx serve exited with {self.process.returncode}; its log ({self.log_path}) ends:\n"
                    + log_tail(self.log_path)
                )
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    if self.dev_mode:
                        self.api_keys = ((self.data_dir / "dev-api-key").read_text().strip(),)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(
            f"skyrl-tx serve did not answer /healthz within {timeout_s} s; its log ({self.log_path}) ends:\n"
            + log_tail(self.log_path)
        )

    def kill(self) -> None:
        """kill -9: no shutdown hooks run."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """Terminate politely."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        """Kill -9 and start again on the same data folder and port."""
        self.kill()
        self.start()


@contextlib.contextmanager
def fresh_postgres_database(base_url: str) -> Iterator[str]:
    """A new, empty database on the PostgreSQL server of `base_url` (its role needs CREATEDB), dropped on exit."""
    from sqlalchemy import create_engine

    name = f"skyrl_tx_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f"CREATE DATABASE {name}")
        yield base_url.rsplit("/", 1)[0] + f"/{name}"
        with admin.connect() as connection:
            connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        admin.dispose()
