"""Who may call the OpenAI-compatible server, and how much one request may send.

`ServingAccess` holds the server's limits; `create_app` applies them: a bearer key on every route but `/health`
(`BearerAuth`, checked from the headers before the body is read), a separate token for the weight-update routes
(`/skyrl/*`, falling back to the API key), a request-body cap counted as the bytes stream in (`BodySizeLimit`), and
FastAPI's `/docs`, `/redoc` and `/openapi.json` pages off unless asked for.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from skyrl_train.config.generator import HttpEndpointConfig
from skyrl_train.serving.body_limit import ASGIApp, Receive, Scope, Send

DEFAULT_MAX_REQUEST_MB = HttpEndpointConfig.max_request_mb
"""Default request-body cap, the same for the standalone server and a training run's endpoint: a 128k-token prompt
as token ids is under 1 MB of JSON."""

API_KEY_ENV = "SKYRL_API_KEY"
"""Environment variable `python -m skyrl_train.entrypoints.serve` (and the `remote` engine) read the API key from when
none is given, so the key stays out of the process list and the run's config."""

WEIGHT_UPDATE_TOKEN_ENV = "SKYRL_WEIGHT_UPDATE_TOKEN"
"""Environment variable holding the weight-update token (same role as `API_KEY_ENV`)."""

OPEN_PATHS = ("/health",)
"""Routes answered without a key (liveness probes)."""

WEIGHT_UPDATE_PREFIX = "/skyrl/"
"""The weight-update routes' prefix: they take the weight-update token, not the API key."""


@dataclass(frozen=True)
class ServingAccess:
    """The server's access rules and limits.

    Attributes:
        api_key: bearer key every route but `/health` requires (`Authorization: Bearer <key>`, as the `openai` client
            sends its `api_key`); None: no key.
        weight_update_token: bearer token the `/skyrl/*` weight-update routes require; None: the API key. Mounting
            those routes without either is refused.
        weight_update_root: the only folder (and its subfolders) the weight-update route loads from; None: the
            `remote` engine's default (`skyrl_train.inference.remote_engine.default_weights_root()`).
        max_request_mb: request-body cap in MiB (413 past it, counted as the body streams in).
        docs: serve FastAPI's `/docs`, `/redoc` and `/openapi.json`.
    """

    api_key: Optional[str] = None
    weight_update_token: Optional[str] = None
    weight_update_root: Optional[str] = None
    max_request_mb: float = DEFAULT_MAX_REQUEST_MB
    docs: bool = False

    def __post_init__(self) -> None:
        if not self.max_request_mb > 0:
            raise ValueError(f"max_request_mb must be > 0, got {self.max_request_mb}")
        for name in ("api_key", "weight_update_token"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise ValueError(f"{name} is empty; give a non-empty key or none")

    @property
    def max_request_bytes(self) -> int:
        """The body cap in bytes."""
        return int(self.max_request_mb * (1 << 20))

    @property
    def update_token(self) -> Optional[str]:
        """The token the weight-update routes take: `weight_update_token`, else `api_key`."""
        return self.weight_update_token or self.api_key


def endpoint_access(settings: Any, environ: Optional[Mapping[str, str]] = None) -> ServingAccess:
    """The `ServingAccess` of a training run's endpoint (`generator.http_endpoint`): its key comes from the environment
    variable `api_key_env` names; a named variable that is unset or empty is an error naming the key."""
    environ = os.environ if environ is None else environ
    api_key = None
    if settings.api_key_env:
        api_key = environ.get(settings.api_key_env, "").strip()
        if not api_key:
            raise ValueError(
                f"generator.http_endpoint.api_key_env={settings.api_key_env!r}, but that environment variable is unset "
                "or empty: export it with the key clients must send, or set api_key_env to null for no key"
            )
    if not settings.max_request_mb > 0:
        raise ValueError(f"generator.http_endpoint.max_request_mb must be > 0, got {settings.max_request_mb}")
    return ServingAccess(api_key=api_key, max_request_mb=float(settings.max_request_mb))


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


class BearerAuth:
    """ASGI middleware: a request must carry `Authorization: Bearer <key>` (compared in constant time) before the app
    sees it; `/skyrl/*` takes the weight-update token, `OPEN_PATHS` take none. A refusal is OpenAI's 401 body."""

    def __init__(self, app: ASGIApp, api_key: Optional[str], weight_update_token: Optional[str]) -> None:
        self.app = app
        self.api_digest = _digest(api_key) if api_key else None
        self.update_digest = _digest(weight_update_token) if weight_update_token else None

    def _required(self, path: str) -> tuple[Optional[bytes], str]:
        if path.startswith(WEIGHT_UPDATE_PREFIX):
            return self.update_digest, "the weight-update token"
        if path in OPEN_PATHS:
            return None, ""
        return self.api_digest, "the API key"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        required, what = self._required(scope.get("path", ""))
        if required is None:
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                given = value
        scheme, _, token = given.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(_digest(token.strip()), required):
            await self.app(scope, receive, send)
            return
        message = (
            f"this route needs {what}: send `Authorization: Bearer <key>`"
            if not given
            else f"the bearer token is not {what} of this server"
        )
        body = json.dumps(
            {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})
