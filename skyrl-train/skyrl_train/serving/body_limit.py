"""A request-body cap that counts bytes as they arrive, so no body larger than the cap is ever buffered.

A `Content-Length` header is only a claim: a chunked body carries none, and a client may send more than it announced.
`BodySizeLimit` wraps the ASGI `receive` channel, adds up the bytes of every `http.request` message and stops the
request the moment the total passes the cap: the app's read raises, and whatever response the app then starts (a
500 from a catch-all handler, say) is replaced by a 413 that names the limit. A `Content-Length` over the cap is
answered 413 before the app runs at all.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyTooLarge(Exception):
    """Raised from `receive` once a request body passes the cap; the middleware answers 413."""


class BodySizeLimit:
    """ASGI middleware: answer 413 to any HTTP request whose body passes `max_bytes`, counted as it streams in."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.app = app
        self.max_bytes = max_bytes

    def _message(self, size: str) -> bytes:
        return json.dumps(
            {"detail": f"request body of {size} bytes exceeds the server's limit of {self.max_bytes} bytes"}
        ).encode()

    async def _reject(self, send: Send, size: str) -> None:
        body = self._message(size)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._reject(send, value.decode())
                return
        received = 0
        exceeded = False
        response_started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                raise BodyTooLarge(f"request body exceeds {self.max_bytes} bytes")
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    exceeded = True
                    raise BodyTooLarge(f"request body exceeds {self.max_bytes} bytes")
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal response_started
            if exceeded:
                # The app's own answer to the aborted read (often a 500) is replaced by one 413.
                if not response_started:
                    response_started = True
                    await self._reject(send, f"more than {self.max_bytes}")
                return
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        with contextlib.suppress(BodyTooLarge):
            await self.app(scope, counting_receive, guarded_send)
        if exceeded and not response_started:
            response_started = True
            await self._reject(send, f"more than {self.max_bytes}")
