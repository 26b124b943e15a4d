"""A real `skyrl-tx serve` subprocess on 127.0.0.1 for the official tinker client to drive."""

from __future__ import annotations

import os

import pytest

from skyrl_tx.local_server import LocalServer

os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tx_server(tmp_path_factory):
    """One server for a test module (dev mode: any `tml-` key)."""
    server = LocalServer(tmp_path_factory.mktemp("tx"))
    server.start()
    yield server
    server.stop()
