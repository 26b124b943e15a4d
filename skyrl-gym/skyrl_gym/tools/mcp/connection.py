"""Hold one MCP client session on a private event loop in a background thread and expose it through blocking calls."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import tempfile
import threading
from typing import Any, Optional

from skyrl_gym.errors import SkyRLGymError
from skyrl_gym.tools.mcp.config import MCPServerConfig

logger = logging.getLogger(__name__)

_CLOSE_TIMEOUT_S = 15.0  # the SDK's stdio shutdown waits at most ~6 s (stdin close, SIGTERM, SIGKILL)
_GRACE_S = 5.0  # slack on top of the SDK's own timeouts before the blocking side gives up
_STDERR_TAIL_BYTES = 800


class MCPConnectionError(SkyRLGymError):
    """An MCP server could not be started or reached, or the connection is gone."""


class MCPCallError(SkyRLGymError):
    """One tool call failed at the protocol level (timeout, crash, closed connection); the message says why."""


def _require_sdk() -> Any:
    try:
        import mcp
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            "the MCP tools need the official MCP Python SDK; install it with `pip install -e './skyrl-gym[mcp]'` from the SkyRL checkout"
        ) from exc
    return mcp


def describe_exception(exc: BaseException) -> str:
    """One line naming the root failures inside an exception (flattening exception groups)."""
    if isinstance(exc, BaseExceptionGroup):
        parts = [describe_exception(inner) for inner in exc.exceptions]
        return "; ".join(dict.fromkeys(parts))
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class MCPConnection:
    """A live session with one MCP server, driven from synchronous code.

    The SDK is async, so `open` starts a daemon thread running a private event loop; one task on it owns the
    transport and the `ClientSession` for their whole life (their task groups must be entered and left by the same
    task) and waits for `close`. Each blocking call hands a coroutine to that loop with `run_coroutine_threadsafe`
    and waits for it with a timeout. A stdio server's stderr goes to a temporary file whose tail is quoted in
    errors.
    """

    def __init__(self, server: str, config: MCPServerConfig) -> None:
        self.server = server
        self.config = config
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._owner: Optional[concurrent.futures.Future] = None
        self._owner_task: Optional[asyncio.Task] = None
        self._ready: concurrent.futures.Future = concurrent.futures.Future()
        self._stop = asyncio.Event()  # not bound to a loop until first awaited (Python >= 3.10)
        self._session: Any = None
        self._failure: Optional[str] = None
        self._stderr: Any = None
        self._closed = False

    # ----- life cycle -------------------------------------------------------------------------------------------
    def open(self) -> list[dict[str, Any]]:
        """Start the server (stdio) or connect (http), run the handshake and return the tool listings as dicts."""
        _require_sdk()
        if self._loop is not None:
            raise MCPConnectionError(f"MCP server '{self.server}': open() may only be called once")
        if self.config.transport == "stdio":
            self._stderr = tempfile.TemporaryFile("w+b")  # noqa: SIM115 - lives as long as the connection
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"mcp-{self.server}", daemon=True)
        self._thread.start()
        self._owner = asyncio.run_coroutine_threadsafe(self._own_session(), self._loop)
        try:
            return self._ready.result(timeout=self.config.connect_timeout + _GRACE_S)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # KeyboardInterrupt and the like: clean up and let it through
                self.close()
                raise
            reason = (
                f"no answer within {self.config.connect_timeout:g} s"
                if isinstance(exc, concurrent.futures.TimeoutError)
                else describe_exception(exc)
            )
            message = f"could not connect to MCP server '{self.server}' ({self.config.describe()}): {reason}"
            message += self._stderr_hint()
            self.close()
            raise MCPConnectionError(message) from None

    @property
    def alive(self) -> bool:
        """True while the session is up: opened, not closed, and the connection has not failed."""
        return (
            self._session is not None
            and not self._closed
            and self._failure is None
            and self._owner is not None
            and not self._owner.done()
        )

    def ping(self, timeout: float = 5.0) -> bool:
        """Round-trip a ping to the server; False when it does not answer in time or the session is gone."""
        if not self.alive:
            return False
        try:
            self._run(self._session.send_ping(), timeout)
        except Exception:
            return False
        return True

    def close(self) -> None:
        """End the session, stop the server process (stdio), stop the loop and join the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        loop, thread = self._loop, self._thread
        if thread is threading.current_thread():  # called on the loop's own thread (e.g. by a finalizer): no waiting
            assert loop is not None
            loop.call_soon(self._stop.set)
            return
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(self._stop.set)
            if self._owner is not None:
                try:
                    self._owner.result(timeout=_CLOSE_TIMEOUT_S)
                except concurrent.futures.TimeoutError:
                    logger.warning(
                        "MCP server '%s' did not shut down in %s s; cancelling", self.server, _CLOSE_TIMEOUT_S
                    )
                    self._owner.cancel()
                except BaseException:  # the owner records its own failures; nothing more to report here
                    pass
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_drain_loop(), loop).result(timeout=_GRACE_S)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=_GRACE_S)
        if loop is not None and not loop.is_running():
            loop.close()
        if self._stderr is not None:
            self._stderr.close()
        self._session = None

    # ----- calls ------------------------------------------------------------------------------------------------
    def call_tool(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call one tool; return the `CallToolResult` as a camelCase dict, or raise `MCPCallError` with the reason."""
        if self._closed:
            raise MCPCallError(f"the connection to MCP server '{self.server}' is closed")
        if not self.alive:
            raise MCPCallError(self._gone_reason())
        timeout = self.config.call_timeout
        try:
            result = self._run(self._call_or_fail(tool, arguments), timeout + _GRACE_S)
        except concurrent.futures.TimeoutError:
            raise MCPCallError(f"tool '{tool}' on MCP server '{self.server}' timed out after {timeout:g} s") from None
        except concurrent.futures.CancelledError:
            raise MCPCallError(f"the connection to MCP server '{self.server}' was closed during the call") from None
        except MCPCallError:
            raise
        except Exception as exc:
            raise MCPCallError(self._call_failure(tool, exc)) from None
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    def _run(self, coro: Any, timeout: float) -> Any:
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    async def _call_or_fail(self, tool: str, arguments: dict[str, Any]) -> Any:
        """Run the call, but give up as soon as the session-owning task ends (transport crash, server gone)."""
        call = asyncio.ensure_future(
            self._session.call_tool(tool, arguments, read_timeout_seconds=self.config.call_timeout)
        )
        assert self._owner_task is not None
        await asyncio.wait({call, self._owner_task}, return_when=asyncio.FIRST_COMPLETED)
        if call.done():
            return call.result()
        call.cancel()
        with contextlib.suppress(BaseException):
            await call
        raise MCPCallError(self._gone_reason())

    def _call_failure(self, tool: str, exc: BaseException) -> str:
        mcp = _require_sdk()
        code = exc.code if isinstance(exc, mcp.MCPError) else None
        if code == mcp.types.REQUEST_TIMEOUT:
            return f"tool '{tool}' on MCP server '{self.server}' timed out after {self.config.call_timeout:g} s"
        if code == mcp.types.CONNECTION_CLOSED:
            self._failure = self._failure or "the server closed the connection"
            return self._gone_reason()
        return f"MCP server '{self.server}' failed to run tool '{tool}': {describe_exception(exc)}"

    def _gone_reason(self) -> str:
        reason = self._failure or "the session has ended"
        return f"lost the connection to MCP server '{self.server}' ({reason}){self._stderr_hint()}"

    def _stderr_hint(self) -> str:
        if self._stderr is None or self._stderr.closed:
            return ""
        fd = self._stderr.fileno()
        size = os.fstat(fd).st_size
        tail = os.pread(fd, _STDERR_TAIL_BYTES, max(0, size - _STDERR_TAIL_BYTES)).decode("utf-8", "replace")
        tail = " ".join(tail.split())  # log lines are often wrapped and padded for a terminal
        return f"; server stderr ends with: {tail}" if tail else ""

    # ----- the session-owning task ------------------------------------------------------------------------------
    async def _own_session(self) -> None:
        self._owner_task = asyncio.current_task()
        mcp = _require_sdk()
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(stack))
                session = await stack.enter_async_context(mcp.ClientSession(read, write))
                try:
                    tools = await asyncio.wait_for(self._handshake(session), self.config.connect_timeout)
                except TimeoutError:
                    timeout = self.config.connect_timeout
                    raise MCPConnectionError(f"no answer to the MCP handshake within {timeout:g} s") from None
                self._session = session
                self._ready.set_result(tools)
                await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc if isinstance(exc, Exception) else MCPConnectionError(repr(exc)))
            elif not self._closed:
                self._failure = describe_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            if not self._closed and self._failure is None and self._ready.done():
                self._failure = "the session ended unexpectedly"

    def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        mcp = _require_sdk()
        config = self.config
        if config.transport == "stdio":
            params = mcp.StdioServerParameters(
                command=config.command, args=list(config.args), env=config.env, cwd=config.cwd
            )
            return mcp.stdio_client(params, errlog=self._stderr)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(
            headers=config.headers, timeout=httpx2.Timeout(config.connect_timeout, read=max(300.0, config.call_timeout))
        )
        stack.push_async_callback(http.aclose)
        return streamable_http_client(config.url, http_client=http)

    async def _handshake(self, session: Any) -> list[dict[str, Any]]:
        mcp = _require_sdk()
        await session.initialize()
        tools: list[dict[str, Any]] = []
        cursor = None
        for _ in range(1000):  # a server that pages forever must not hang the handshake
            params = None if cursor is None else mcp.types.PaginatedRequestParams(cursor=cursor)
            listing = await session.list_tools(params=params)
            tools.extend(t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in listing.tools)
            cursor = listing.next_cursor
            if not cursor:
                break
        return tools


async def _drain_loop() -> None:
    """Cancel and await every task still on the loop, then finish its async generators and default executor."""
    loop = asyncio.get_running_loop()
    tasks = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await loop.shutdown_asyncgens()
    await loop.shutdown_default_executor()
