"""The actors' local channel (`utils.local_channel`): a real Unix socket served in this process's event loop or from a
thread of its own, checked for concurrent calls answered out of order, errors travelling back (with the actor's
traceback), a closed or missing server failing the calls that wait on it with `ChannelError`, and one connection per
calling event loop."""

import asyncio
import os
import pickle
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from skyrl_train.utils.local_channel import (
    ChannelAddress,
    ChannelClient,
    ChannelClients,
    ChannelError,
    ChannelServer,
    RemoteCallError,
    ThreadedChannelServer,
    sweep_stale_channel_dirs,
)


class _Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("this exception does not pickle")


@pytest.fixture
def socket_dir():
    """A fresh directory with a short path for Unix sockets, whose paths must stay under 108 bytes: pytest's
    `tmp_path` for a long test name can exceed that, the more so in a pytest-xdist worker (`.../popen-gw0/...`)."""
    directory = Path(tempfile.mkdtemp(prefix="ch-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


async def _handler(value, delay=0.0, fail=None):
    await asyncio.sleep(delay)
    if fail == "value":
        raise ValueError(f"bad value {value}")
    if fail == "unpicklable":
        raise _Unpicklable("kept as text")
    return {"echo": value, "delay": delay}


async def test_concurrent_calls_get_their_own_replies_in_any_order():
    server = ChannelServer(_handler)
    path = await server.start()
    client = ChannelClient(path, "test engine")
    try:
        # the first call's reply comes back last: replies are matched by request id, not by order
        replies = await asyncio.gather(*(client.call(i, 0.03 * (3 - i)) for i in range(4)))
        assert [reply["echo"] for reply in replies] == [0, 1, 2, 3]
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700  # only this user can connect
    finally:
        client.close()
        await server.close()
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


async def test_errors_raised_by_the_handler_reach_the_caller():
    server = ChannelServer(_handler)
    client = ChannelClient(await server.start(), "test engine")
    try:
        with pytest.raises(ValueError, match="bad value 7") as raised:
            await client.call(7, 0.0, "value")
        assert any("in _handler" in note for note in raised.value.__notes__)  # where the actor raised it
        with pytest.raises(RemoteCallError, match="kept as text"):  # as its traceback's text
            await client.call(8, 0.0, "unpicklable")
        assert (await client.call(9))["echo"] == 9  # the connection still serves
    finally:
        client.close()
        await server.close()


async def test_a_server_that_closes_fails_the_waiting_call_and_the_next_ones():
    server = ChannelServer(_handler)
    client = ChannelClient(await server.start(), "engine 3")
    waiting = asyncio.ensure_future(client.call(1, 30.0))
    await asyncio.sleep(0.05)
    await server.close()
    with pytest.raises(ChannelError, match="engine 3"):
        await asyncio.wait_for(waiting, timeout=10)
    with pytest.raises(ChannelError, match="engine 3"):
        await client.call(2)
    assert not client.usable


async def test_a_missing_socket_is_a_channel_error(tmp_path):
    client = ChannelClient(ChannelAddress(str(tmp_path / "gone.sock"), b"k" * 32), "engine 5")
    with pytest.raises(ChannelError, match="cannot connect to engine 5"):
        await client.call(1)


class _TouchOnLoad:
    """Unpickles as `Path(marker).touch()`: proof that the server ran code from a request."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def _raw_request(path: str, first_bytes: bytes, marker: Path) -> bytes:
    """Connect like a process that found the socket, send `first_bytes` and a request frame whose body touches
    `marker` when unpickled, and return what the server answers before closing."""
    body = pickle.dumps((_TouchOnLoad(marker),))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5.0)
        sock.connect(path)
        sock.sendall(first_bytes + (1).to_bytes(8, "little") + len(body).to_bytes(8, "little") + body)
        received = b""
        while chunk := sock.recv(1 << 16):
            received += chunk
    return received


@pytest.mark.parametrize("first_bytes", [b"", b"x" * 32], ids=["no-key", "wrong-key"])
async def test_a_connection_without_the_servers_key_never_gets_a_frame_unpickled(tmp_path, first_bytes):
    # security review #23: a same-user process (e.g. a sandboxed program without Landlock) could send a pickle
    server = ThreadedChannelServer(_in_thread, "keyed-channel")
    address = server.start()
    marker = tmp_path / "code-ran"
    try:
        answer = await asyncio.to_thread(_raw_request, address, first_bytes, marker)
        assert answer == b"" and not marker.exists()  # closed without reading, let alone unpickling, the frame
        assert await ChannelClient(address, "rank 1").call(3) == (3, "keyed-channel", False)  # the key opens it
    finally:
        server.close()


def test_the_address_keeps_its_key_out_of_its_text_but_through_pickling():
    address = ChannelAddress("/tmp/skyrl-channel-1-x/channel.sock", bytes(range(32)))
    assert str(address) == "/tmp/skyrl-channel-1-x/channel.sock" and bytes(range(32)).hex() not in repr(address)
    copy = pickle.loads(pickle.dumps(address))  # what Ray does with open_channel's answer
    assert copy == address and copy.key == bytes(range(32))


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


async def test_the_sweep_removes_only_the_channel_directories_nothing_serves(socket_dir):
    """A socket that refuses connections (its server died without closing) and a socket-less directory of a dead
    process go; a live server's directory, a live process's empty one and other files stay."""
    dead_socket = socket_dir / "skyrl-channel-1-dead"
    dead_socket.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(dead_socket / "channel.sock"))  # bound, then closed without unlinking: what a killed actor leaves
    listener.close()
    dead_process = socket_dir / f"skyrl-channel-{_dead_pid()}-empty"
    dead_process.mkdir()
    live_process = socket_dir / f"skyrl-channel-{os.getpid()}-starting"
    live_process.mkdir()
    unrelated = socket_dir / "skyrl-other-1"
    unrelated.mkdir()
    live = socket_dir / "skyrl-channel-2-live"
    live.mkdir()
    server = await asyncio.start_unix_server(lambda reader, writer: writer.close(), path=str(live / "channel.sock"))
    try:
        removed = await asyncio.to_thread(sweep_stale_channel_dirs, str(socket_dir))
    finally:
        server.close()
    assert sorted(removed) == sorted([str(dead_socket), str(dead_process)])
    assert sorted(path.name for path in socket_dir.iterdir()) == sorted([live_process.name, unrelated.name, live.name])


async def test_a_sweep_while_a_server_starts_to_listen_leaves_its_socket(monkeypatch, socket_dir):
    """Another process's sweep can run between the server's `bind` and `listen` (a starting rank's thread may wait for
    the GIL there): a socket found at the channel's path then must already listen, or the sweep takes it for a dead
    server's and removes the live server's directory (clients then fail with "No such file or directory")."""
    monkeypatch.setattr(tempfile, "tempdir", str(socket_dir))
    real_listen = socket.socket.listen
    sweeps: list[list[str]] = []

    def listen_after_a_sweep(sock, *args):
        sweeps.append(sweep_stale_channel_dirs(str(socket_dir)))
        return real_listen(sock, *args)

    monkeypatch.setattr(socket.socket, "listen", listen_after_a_sweep)
    server = ChannelServer(_handler)
    path = await server.start()
    client = ChannelClient(path, "starting engine")
    try:
        assert sweeps and not any(sweeps)  # the window was swept, and nothing was taken for dead
        assert (await client.call(5))["echo"] == 5
    finally:
        client.close()
        await server.close()


async def test_a_server_names_its_directory_after_its_process_and_removes_it_on_close():
    server = ChannelServer(_handler)
    path = await server.start()
    directory = os.path.dirname(path)
    assert os.path.basename(directory).startswith(f"skyrl-channel-{os.getpid()}-")
    await server.close()
    assert not os.path.exists(directory)


async def test_concurrent_starts_listen_once():
    server = ChannelServer(_handler)
    first, second = await asyncio.gather(server.start(), server.start())
    client = ChannelClient(first, "test engine")
    try:
        assert first == second == await server.start()
        assert (await client.call(4))["echo"] == 4
    finally:
        client.close()
        await server.close()


def _in_thread(value, fail=False):
    """A plain (blocking) handler: reports the thread it ran in."""
    if fail:
        raise KeyError(f"no {value}")
    return value, threading.current_thread().name, getattr(_SETUP, "done", False)


_SETUP = threading.local()


async def test_a_threaded_server_runs_a_plain_handler_in_its_own_thread_one_call_at_a_time():
    server = ThreadedChannelServer(_in_thread, "rank-7-channel", initializer=lambda: setattr(_SETUP, "done", True))
    path = server.start()
    assert server.start() == path  # started once
    client = ChannelClient(path, "rank 7")
    try:
        replies = await asyncio.gather(*(client.call(i) for i in range(3)))
        # every call ran in the server's thread, after its initializer (thread-local set-up such as a CUDA device)
        assert replies == [(i, "rank-7-channel", True) for i in range(3)]
        with pytest.raises(KeyError, match="no 5"):
            await client.call(5, True)
        assert (await client.call(6))[0] == 6
    finally:
        client.close()
        server.close()
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
    assert not any(thread.name == "rank-7-channel" for thread in threading.enumerate())


async def test_a_threaded_server_that_closed_fails_the_next_calls():
    server = ThreadedChannelServer(_in_thread, "closing-channel")
    client = ChannelClient(server.start(), "rank 2")
    assert (await client.call(0))[0] == 0
    server.close()  # an idle server stops at once, closing its connections
    with pytest.raises(ChannelError, match="rank 2"):
        await asyncio.wait_for(client.call(1), timeout=10)


def test_channel_clients_keep_one_connection_per_event_loop_and_drop_those_of_closed_loops():
    server = ThreadedChannelServer(_in_thread, "shared-channel")
    clients = ChannelClients(server.start(), "rank 0")

    async def call(value):
        client = clients.for_running_loop()
        assert clients.for_running_loop() is client  # the same connection within one loop
        return client, await client.call(value)

    try:
        first, reply = asyncio.run(call(1))
        assert reply[0] == 1 and list(clients._clients.values()) == [first]
        second, reply = asyncio.run(call(2))  # a new loop: a new connection; the closed loop's is dropped
        assert reply[0] == 2 and second is not first and list(clients._clients.values()) == [second]
    finally:
        clients.close()
        server.close()


async def test_send_writes_the_request_before_the_caller_yields_to_its_event_loop():
    arrived = threading.Event()

    def handler(value):
        arrived.set()
        return value * 2

    server = ThreadedChannelServer(handler, "send-channel")
    client = ChannelClient(server.start(), "rank 3")
    try:
        with pytest.raises(ChannelError, match="not opened yet"):
            client.send(1)  # `send` needs the connection `call` opens
        assert not client.connected
        assert await client.call(1) == 2
        assert client.connected
        arrived.clear()
        reply = client.send(21)
        # this event loop does not run until the wait below returns: only a request written by `send` itself can
        # have reached the server's thread (a call scheduled as a task would still wait for the loop)
        assert arrived.wait(timeout=10.0)
        assert await reply == 42
    finally:
        client.close()
        server.close()
