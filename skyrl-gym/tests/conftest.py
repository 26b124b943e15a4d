"""Fixtures shared by the gym tests: a real BM25 retrieval server and the example MCP server on 127.0.0.1, a URL
nothing listens on, a maker of search envs on the server, the expected
whole output of a step, a reader of this process's child pids, and the parametrization of reader tables (`READINGS`).
"""

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Optional

import pytest

import skyrl_gym
from skyrl_gym.tools.retrieval_server import RetrievalServer


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    """A retrieval server over the requesting test module's `CORPUS` (a list of {id, title, text} rows)."""
    corpus = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(row) for row in request.module.CORPUS), encoding="utf-8")
    with RetrievalServer(corpus) as running:
        yield running


@pytest.fixture
def closing():
    """`closing(env)` returns `env` and closes it after the test, so no connection outlives the test."""
    opened = []

    def track(env):
        opened.append(env)
        return env

    yield track
    for env in reversed(opened):
        env.close()


@pytest.fixture
def step_output():
    """`step_output(reward, done, metadata, observation=None)`: the whole dict a text env's `step` should return (one
    user message `observation`, or none, and the action not rewritten), written out here rather than taken from the
    package's `reply_step`/`final_step`, so that a test comparing against it checks those too."""

    def build(reward: float, done: bool, metadata: dict, observation: Optional[str] = None) -> dict:
        observations = [] if observation is None else [{"role": "user", "content": observation}]
        return {
            "observations": observations,
            "reward": reward,
            "done": done,
            "postprocessed_action": None,
            "metadata": metadata,
        }

    return build


@pytest.fixture
def make_search_env(request, closing):
    """`make_search_env(url, ground_truth=None, max_turns=None, **env_config)`: an env on the retrieval server at `url`,
    started on the module's `PROMPT` and closed after the test. The requesting module's `SEARCH_ENV` gives the env id,
    its env_config defaults and the ground truth used when none is passed."""
    name, defaults, default_truth = request.module.SEARCH_ENV

    def make(url: str, ground_truth=None, max_turns=None, **config):
        truth = default_truth if ground_truth is None else ground_truth
        extras = {"reward_spec": {"method": "rule", "ground_truth": truth}}
        if max_turns is not None:
            extras["max_turns"] = max_turns
        env = closing(skyrl_gym.make(name, env_config={"search_url": url, **defaults, **config}, extras=extras))
        env.init(request.module.PROMPT)
        return env

    return make


@pytest.fixture
def closed_port_url() -> str:
    """An http URL on 127.0.0.1 whose port was just free: nothing listens there."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


def _read_child_pids() -> set[int]:
    children = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                children.add(int(entry))
    return children


@pytest.fixture
def child_pids() -> Callable[[], set[int]]:
    """`child_pids()`: the pids of this process's living or zombie children, read from /proc (to check that a
    server subprocess started and was reaped)."""
    return _read_child_pids


MCP_SERVER_SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "mcp" / "calculator_server.py"


@pytest.fixture(scope="module")
def mcp_http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Run the example MCP server (with its debug tools) over streamable HTTP on a free local port for the module;
    yield its MCP URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (tmp_path_factory.mktemp("mcp") / "server.log").open("w")
    command = [sys.executable, str(MCP_SERVER_SCRIPT), "--transport", "http", "--port", str(port), "--debug-tools"]
    process = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, f"the HTTP MCP server exited early; see {log.name}"
            assert time.monotonic() < deadline, "the HTTP MCP server did not start listening within 30 s"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking `reader, given, expected` runs once per row of its module's `READINGS`, a dict mapping each
    reader (an extractor or parser under test) to its (input, expected return value) rows; ids name the reader."""
    if "reader" in metafunc.fixturenames:
        rows = [
            pytest.param(reader, given, expected, id=f"{reader.__name__}-{index}")
            for reader, cases in metafunc.module.READINGS.items()
            for index, (given, expected) in enumerate(cases)
        ]
        metafunc.parametrize("reader, given, expected", rows)
