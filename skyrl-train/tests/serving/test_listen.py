"""`listen_socket` holds a port from the moment a CLI starts; `spare_port` stays clear of the OS's `bind(0)` range."""

import socket
import threading

import httpx
import pytest
from fastapi import FastAPI

from skyrl_train.serving import listen
from skyrl_train.serving.listen import ephemeral_range, listen_socket, serve_on, spare_port


def test_a_taken_port_is_refused_naming_the_flag_and_address():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit, match=rf"--port {port}: cannot listen on 127.0.0.1:{port}"):
            listen_socket("127.0.0.1", port)


def test_the_socket_listens_before_the_app_exists_and_uvicorn_answers_on_it():
    listener = listen_socket("127.0.0.1", 0)
    port = listener.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # accepted into the backlog while nothing serves yet: the port is held
    with pytest.raises(SystemExit, match="cannot listen"):
        listen_socket("127.0.0.1", port)
    app = FastAPI()

    @app.get("/ping")
    def ping() -> dict:
        return {"pong": True}

    threading.Thread(target=serve_on, args=(app, listener), daemon=True).start()
    assert httpx.get(f"http://127.0.0.1:{port}/ping", timeout=30).json() == {"pong": True}


@pytest.mark.parametrize("configured", [None, "30000 40000", "1024 65000"], ids=["this-machine", "mid", "everything"])
def test_spare_ports_are_free_and_outside_the_ephemeral_range_when_it_leaves_room(tmp_path, monkeypatch, configured):
    if configured is not None:
        (tmp_path / "range").write_text(configured + "\n")
        monkeypatch.setattr(listen, "EPHEMERAL_RANGE_FILE", tmp_path / "range")
    low, high = ephemeral_range()
    assert 0 < low <= high < 65536
    room = low - listen.SPARE_PORTS_FLOOR >= 1000 or 65535 - high >= 1000
    for _ in range(20):
        port = spare_port()
        if room:
            assert not low <= port <= high
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free: binding it succeeds (with no room, it is one the OS picked)
