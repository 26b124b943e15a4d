"""A Unix-socket channel for an actor's hot calls from a process on the same machine.

A Ray actor call costs milliseconds of round trip (submitting, scheduling, the reply's own trip), a local socket a
small fraction of that (docs/performance.md). So the actors on the hot path
also serve a few calls on a Unix socket: `EngineActor` its `generate` in its own event loop (`ChannelServer`), the
worker ranks their sharded calls (the policy update, log-prob forwards) from a thread of their own
(`ThreadedChannelServer`). Their callers send those calls there when the actor runs on their machine (`ChannelClient`,
one per calling event loop: `ChannelClients`); everything else (start-up, weight sync, checkpoints, teardown,
failures) stays with Ray, and so do the calls to an actor on another machine.

Frames are `<request id: u64><length: u64><pickled body>` both ways. A request's body is the tuple of arguments the
server's handler takes; a reply's body is `(True, output)` or `(False, error)`. Requests are pickles, so only the
actor's own callers may send them: the socket sits in a directory only this user can enter, and each server makes a
random key that its address carries (`ChannelAddress.key`, handed to callers through Ray); a connection's first 32
bytes must be that key, else the server closes it before reading any frame. A process of the same user that finds
the socket (a sandboxed program whose Landlock layer is missing, say) cannot have the actor unpickle anything. Requests on one connection run
concurrently on an event-loop server (a multi-turn generator keeps many in flight) and one after the other on a
threaded one, so replies come back in any order, matched by id. A connection that closes fails every call still
waiting on it, naming the actor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import os
import pickle
import secrets
import shutil
import socket
import struct
import tempfile
import threading
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, Optional

HEADER = struct.Struct("<QQ")
KEY_BYTES = 32
"""Length of a server's key, which a client sends first on every connection."""
CHANNEL_DIR_PREFIX = "skyrl-channel-"
"""Name prefix of a server's socket directory in the temp dir: `skyrl-channel-<pid>-<random>`."""
_swept = False


class ChannelAddress(str):
    """A channel's socket path (the string itself) carrying the server's key (`key`), which is kept out of the
    string so that logs and error messages never show it."""

    key: bytes

    def __new__(cls, path: str, key: bytes) -> ChannelAddress:
        address = super().__new__(cls, path)
        address.key = key
        return address

    def __reduce__(self) -> tuple:  # through Ray to the callers: the key travels with the path
        return ChannelAddress, (str(self), self.key)


class ChannelError(ConnectionError):
    """The channel to an actor closed (the actor died or tore down) while a call waited on it."""


class RemoteCallError(RuntimeError):
    """A call that raised in the actor, when its exception could not travel back as itself."""


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    request_id, size = HEADER.unpack(await reader.readexactly(HEADER.size))
    return request_id, await reader.readexactly(size)


def _frame(request_id: int, body: bytes) -> bytes:
    return HEADER.pack(request_id, len(body)) + body


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # the process exists; another user owns it
    return True


def _is_stale(directory: str) -> bool:
    """True when nothing serves `directory`'s socket any more: its socket refuses connections, or (no socket) the
    process named in the directory's name is gone."""
    path = os.path.join(directory, "channel.sock")
    if os.path.exists(path):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            return True
        except OSError:
            return False  # e.g. a full backlog: someone listens
        finally:
            probe.close()
        return False
    pid = os.path.basename(directory)[len(CHANNEL_DIR_PREFIX) :].split("-", 1)[0]
    return pid.isdigit() and not _process_alive(int(pid))


def sweep_stale_channel_dirs(root: Optional[str] = None) -> list[str]:
    """Remove this user's channel directories in `root` (default: the temp dir) that nothing serves any more, e.g.
    left by an actor killed without `close`; returns the removed paths. A server calls it once per process before
    it first listens."""
    root = root or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        directory = os.path.join(root, name)
        if not name.startswith(CHANNEL_DIR_PREFIX):
            continue
        try:
            if os.lstat(directory).st_uid != os.getuid() or not os.path.isdir(directory):
                continue
            if _is_stale(directory):
                shutil.rmtree(directory)
                removed.append(directory)
        except OSError:  # removed meanwhile by another sweeper, or not ours to remove
            continue
    return removed


def _listening_socket(path: str) -> socket.socket:
    """A Unix socket listening at `path`, which appears there only once the socket listens. A socket between `bind`
    and `listen` refuses connections, which is how `sweep_stale_channel_dirs` (run by every new server process) tells
    a dead server's socket: binding at `path` directly let another process's sweep remove a live server's directory in
    that window (a starting rank's thread can wait there for the GIL for milliseconds). So it binds under another name
    in the same directory, listens, then renames."""
    binding = os.path.join(os.path.dirname(path), "binding.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(binding)
        sock.listen(100)
        os.rename(binding, path)
    except BaseException:
        sock.close()
        raise
    return sock


def _error_body(exc: BaseException) -> bytes:
    """The pickled `(False, exc)`, or a `RemoteCallError` carrying its traceback when `exc` does not pickle."""
    try:
        return pickle.dumps((False, exc), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - any pickling failure: send the text instead
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return pickle.dumps((False, RemoteCallError(text)), protocol=pickle.HIGHEST_PROTOCOL)


class ChannelServer:
    """Serves `handler(*pickle.loads(body))` for each request frame, on a Unix socket in the running event loop."""

    def __init__(self, handler: Callable[..., Awaitable[Any]]) -> None:
        self.handler = handler
        self.path: Optional[str] = None
        self._key = secrets.token_bytes(KEY_BYTES)
        self._server: Optional[asyncio.AbstractServer] = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._starting: Optional[asyncio.Future] = None

    async def start(self) -> ChannelAddress:
        """Listen (once, however many callers ask at the same time) and return the socket's address (its path, with
        the key a client must send first). The socket sits in a directory only this user can enter (`mkdtemp`):
        requests are pickles, which another user must not be able to send, nor this user's other processes, which
        lack the key."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._listen())
        return await asyncio.shield(self._starting)

    async def _listen(self) -> ChannelAddress:
        global _swept
        if not _swept:
            _swept = True
            sweep_stale_channel_dirs()
        directory = tempfile.mkdtemp(prefix=f"{CHANNEL_DIR_PREFIX}{os.getpid()}-")
        path = os.path.join(directory, "channel.sock")
        self._server = await asyncio.start_unix_server(self._serve, sock=_listening_socket(path))
        self.path = path
        return ChannelAddress(path, self._key)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            if not hmac.compare_digest(await reader.readexactly(KEY_BYTES), self._key):
                return  # not one of the actor's callers: no frame of it is ever unpickled
            while True:
                request_id, body = await _read_frame(reader)
                task = asyncio.create_task(self._answer(request_id, body, writer))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, request_id: int, body: bytes, writer: asyncio.StreamWriter) -> None:
        try:
            reply = pickle.dumps((True, await self.handler(*pickle.loads(body))), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - the caller re-raises it
            # the traceback does not pickle: its text travels as a note, so the caller sees where the actor raised
            remote = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            exc.add_note(f"raised in the actor serving this channel (pid {os.getpid()}):\n{remote}")
            reply = _error_body(exc)
        if not writer.is_closing():
            writer.write(_frame(request_id, reply))  # one write per frame: frames of concurrent replies never mix

    async def close(self) -> None:
        """Stop listening, close the open connections (their waiting calls fail), cancel running requests and remove
        the socket file."""
        server, self._server = self._server, None
        if server is not None:
            server.close()  # stops accepting; the connections already accepted stay open until closed here
            for writer in list(self._writers):
                writer.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(self.path))


class ChannelClient:
    """One connection to a `ChannelServer`, bound to the event loop that opened it (a caller with several event
    loops, e.g. a training loop and an HTTP endpoint's thread, keeps one client per loop); `call(*args)` sends a
    request and waits for its reply."""

    def __init__(self, path: str, name: str) -> None:
        self.path = path
        self.name = name
        self._key: Optional[bytes] = getattr(path, "key", None)
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._reader_task: Optional[asyncio.Task] = None
        self._waiting: dict[int, asyncio.Future] = {}
        self._next_id = 0
        self._closed_because: Optional[str] = None
        self._connecting: Optional[asyncio.Future] = None

    async def _connect(self) -> None:
        if self._key is None:
            self._closed_because = "not opened: its address carries no key"
            raise ChannelError(f"cannot connect to {self.name} at {self.path}: the address carries no key")
        try:
            reader, self._writer = await asyncio.open_unix_connection(self.path)
        except OSError as exc:
            self._closed_because = f"not reachable ({type(exc).__name__}: {exc})"
            raise ChannelError(f"cannot connect to {self.name} at {self.path}: {exc}") from exc
        self._writer.write(self._key)
        self.loop = asyncio.get_running_loop()
        self._reader_task = asyncio.create_task(self._read_replies(reader))

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        reason = "closed by the actor"
        try:
            while True:
                request_id, body = await _read_frame(reader)
                future = self._waiting.pop(request_id, None)
                if future is not None and not future.done():
                    future.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            reason = f"closed by the actor ({type(exc).__name__})"
        except asyncio.CancelledError:
            reason = "closed by this process"
            raise
        finally:
            self._closed_because = reason
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(ChannelError(f"the channel to {self.name} was {reason} during a call"))
            self._waiting.clear()

    @property
    def usable(self) -> bool:
        """Whether calls may go through this connection from the running event loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return self._closed_because is None and (self.loop is None or self.loop is loop)

    @property
    def connected(self) -> bool:
        """Whether `send` can write a request now: the connection is open and has not closed."""
        return self._writer is not None and self._closed_because is None

    async def call(self, *args: Any) -> Any:
        """Send `args` to the server's handler and return what it returned (or raise what it raised)."""
        if self._writer is None:  # concurrent first calls share one connection attempt
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect())
            await asyncio.shield(self._connecting)
        return await self._reply(self._write(args))

    def send(self, *args: Any) -> asyncio.Task:
        """Write the request `args` now, without yielding to the event loop, and return a task that resolves to its
        reply (what the handler returned, or raised): a caller that is not about to await can have the actor start
        at once. Needs an open connection (`connected`; `call` opens one); raises `ChannelError` otherwise."""
        return asyncio.get_running_loop().create_task(self._reply(self._write(args)))

    def _write(self, args: tuple) -> asyncio.Future:
        """Write one request frame; returns the future its reply's body resolves."""
        if not self.connected:
            raise ChannelError(f"the channel to {self.name} was {self._closed_because or 'not opened yet'}")
        self._next_id += 1
        request_id = self._next_id
        future = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        self._writer.write(_frame(request_id, pickle.dumps(args, protocol=pickle.HIGHEST_PROTOCOL)))
        return future

    @staticmethod
    async def _reply(future: asyncio.Future) -> Any:
        ok, value = pickle.loads(await future)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Drop the connection (calls still waiting fail with `ChannelError`)."""
        if self._reader_task is not None and not self._reader_task.done():
            self._reader_task.cancel()
        if self._writer is not None:
            self._writer.close()


class ChannelClients:
    """The connections of one caller to one actor's channel at `path`: one `ChannelClient` per calling event loop
    (e.g. a training loop and an HTTP endpoint's thread), those of closed loops dropped when another loop connects."""

    def __init__(self, path: str, name: str) -> None:
        self.path = path
        self.name = name
        self._clients: dict[asyncio.AbstractEventLoop, ChannelClient] = {}

    def for_running_loop(self) -> ChannelClient:
        """The running event loop's connection (made on first use)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            for closed in [other for other in self._clients if other.is_closed()]:  # its loop ended (asyncio.run)
                del self._clients[closed]
            client = self._clients[loop] = ChannelClient(self.path, self.name)
        return client

    def close(self) -> None:
        """Close the running loop's connection (another loop's closes with its loop) and forget them all."""
        try:
            loop: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        client = self._clients.get(loop) if loop is not None else None
        if client is not None:
            client.close()
        self._clients.clear()


class ThreadedChannelServer:
    """A `ChannelServer` whose handler is a plain function, run in a thread of its own with its own event loop: for an
    actor whose calls run synchronously (a worker rank). Requests run one at a time, in that thread; `initializer`
    runs there first (e.g. selecting the rank's CUDA device, which is per thread)."""

    def __init__(self, handler: Callable[..., Any], name: str, initializer: Optional[Callable[[], None]] = None):
        self.name = name
        self._handler = handler
        self._initializer = initializer
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._server: Optional[ChannelServer] = None
        self._thread: Optional[threading.Thread] = None
        self.path: Optional[str] = None

    def start(self) -> str:
        """Start the thread (once) and return the socket's address (`ChannelAddress`) once it listens."""
        if self.path is not None:
            return self.path
        started: concurrent.futures.Future = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(started,), name=self.name, daemon=True)
        self._thread.start()
        self.path = started.result(timeout=60)
        return self.path

    def _run(self, started: concurrent.futures.Future) -> None:
        loop = self._loop = asyncio.new_event_loop()
        try:
            if self._initializer is not None:
                self._initializer()

            async def handle(*args: Any) -> Any:
                return self._handler(*args)  # in this loop's thread: one request at a time

            self._server = ChannelServer(handle)
            started.set_result(loop.run_until_complete(self._server.start()))
        except BaseException as exc:  # noqa: BLE001 - the starting caller re-raises it
            started.set_exception(exc)
            loop.close()
            return
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._server.close())
            loop.close()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop serving: close the connections and the socket, end the thread (waiting up to `timeout_s` for a request
        still running)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
