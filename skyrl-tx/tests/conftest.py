"""A real `skyrl-tx serve` subprocess on 127.0.0.1 for the official tinker client to drive."""

from __future__ import annotations

import contextlib
import os

import pytest

from skyrl_tx.local_server import LocalServer, fresh_postgres_database

os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def make_client():
    """`make_client(url, key)`: a tinker ServiceClient closed after the test (else its heartbeat thread keeps
    calling a server that is gone and logs connection errors at exit)."""
    import tinker

    made = []

    def make(url: str, key: str):
        client = tinker.ServiceClient(base_url=url, api_key=key)
        made.append(client)
        return client

    yield make
    for client in made:
        with contextlib.suppress(Exception):
            client.close("success")


@pytest.fixture(scope="module")
def ray_cluster():
    """The module's Ray: a local one (4 CPUs, no token auth, which server subprocesses inherit) unless the session
    already runs one. Yields the address a server joins with `--ray-address`."""
    import ray

    started = not ray.is_initialized()
    previous = os.environ.get("RAY_AUTH_MODE")
    if started:
        os.environ["RAY_AUTH_MODE"] = "disabled"  # a throwaway local cluster on 127.0.0.1
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()
        if previous is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = previous


TEST_KEYS = ("tml-client-flow", "tml-bad-input", "tml-raw", "tml-owner", "tml-intruder")
"""The keys the module servers accept (the tests act as several tenants)."""


@pytest.fixture(scope="module")
def tx_server(tmp_path_factory):
    """One server for a test module, accepting `TEST_KEYS`."""
    server = LocalServer(tmp_path_factory.mktemp("tx"), api_keys=TEST_KEYS)
    server.start()
    yield server
    server.stop()


def postgres_base_url() -> str:
    """The URL `scripts/postgres.sh` printed (exported by scripts/test.sh). When scripts/test.sh could not start
    PostgreSQL it says why in SKYRL_TX_POSTGRES_UNAVAILABLE and these tests skip with that reason; with neither set
    they skip here and fail under CI (CI runs scripts/test.sh)."""
    url = os.environ.get("SKYRL_TX_POSTGRES_URL")
    if not url:
        unavailable = os.environ.get("SKYRL_TX_POSTGRES_UNAVAILABLE")
        if unavailable:
            pytest.skip(f"PostgreSQL could not be started on this machine: {unavailable}")
        message = "SKYRL_TX_POSTGRES_URL is not set: run `export SKYRL_TX_POSTGRES_URL=$(bash scripts/postgres.sh)`"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run the Postgres tests)")
        pytest.skip(message)
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(url)
    except ArgumentError:
        pytest.fail(f"SKYRL_TX_POSTGRES_URL={url!r} is not a database URL (scripts/postgres.sh prints one)")
    return url


@pytest.fixture
def postgres_url():
    """A fresh, empty PostgreSQL database for one test (dropped afterwards)."""
    with fresh_postgres_database(postgres_base_url()) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request, tmp_path):
    """Each backend the service supports: a SQLite file, and a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tx.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture(scope="session")
def save_tiny_model(tmp_path_factory):
    """`save_tiny_model(size=3)`: a tiny random Qwen-shaped model of that `TinyModelSpec` size with the char tokenizer
    (context 512), saved once per size and test session; its folder."""
    from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
    from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer

    folders: dict[int, str] = {}

    def save(size: int = TinyModelSpec.size) -> str:
        if size not in folders:
            folder = tmp_path_factory.mktemp(f"tiny-model-{size}")
            tokenizer = build_char_tokenizer()
            build_tiny_model(TinyModelSpec(size=size, vocab_size=len(tokenizer))).save_pretrained(folder)
            save_tokenizer(tokenizer, folder)
            folders[size] = str(folder)
        return folders[size]

    return save


@pytest.fixture(scope="session")
def tiny_model_dir(save_tiny_model) -> str:
    """The default-size tiny model's folder (see `save_tiny_model`)."""
    return save_tiny_model()


TINY = "org/tiny"
"""The name `make_app` serves the tiny model under."""


@pytest.fixture
def make_app(tmp_path, tiny_model_dir):
    """`make_app(limits=None, keys=("tml-a", "tml-b"), **create_app_kwargs)`: a started `Service` on the tiny model
    (SQLite under tmp_path) and a `TestClient` over its app, in this process; returns (client, service). Everything
    is stopped after the test."""
    from fastapi.testclient import TestClient

    from skyrl_tx.app import ApiKeys, create_app
    from skyrl_tx.db import Database
    from skyrl_tx.limits import Limits
    from skyrl_tx.service import BaseModel, Service

    made = []

    def make(limits=None, keys=("tml-a", "tml-b"), folder=None, **kwargs):
        folder = folder or tmp_path
        service = Service(
            Database(f"sqlite:///{folder / 'tx.db'}"),
            folder,
            {TINY: BaseModel(TINY, tiny_model_dir, tiny_model_dir)},
            session_timeout_s=0,
            limits=limits or Limits(),
        )
        service.start()
        client = TestClient(create_app(service, ApiKeys.of(keys), poll_seconds=kwargs.pop("poll_seconds", 5), **kwargs))
        client.__enter__()
        made.append((client, service))
        return client, service

    yield make
    for client, service in made:
        client.__exit__(None, None, None)
        service.stop()
        service.db.engine.dispose()
