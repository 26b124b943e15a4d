"""The Tinker REST routes (`/api/v1/...`) over a `Service`, as the official client 0.38 calls them.

Mutating calls answer at once with `{request_id}`; results come from `retrieve_future`, which long-polls for at most
`poll_seconds` and then answers `try_again`. forward_backward bodies and the results of forward_backward and sample
are protobuf; everything else is JSON. Every route checks `X-API-Key`, and callers only see what their key created.
Request bodies are counted as they stream in (`BodySizeLimit`: 413 past the cap) and large ones are decoded off the
event loop; budgets answer 400 and per-key quotas 429, each naming the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from skyrl_train.serving.body_limit import BodySizeLimit
from skyrl_tx import __version__
from skyrl_tx.compute import read_meta
from skyrl_tx.db import DONE, FAILED, CheckpointRow, ModelRow
from skyrl_tx.futures import Conflict, UserError
from skyrl_tx.limits import QuotaExceeded
from skyrl_tx.losses import LossInputError
from skyrl_tx.request_errors import NotFound, SessionEnded
from skyrl_tx.service import Service
from skyrl_tx.wire import WireError, decode_forward_backward

log = logging.getLogger("skyrl_tx")
PROTO = "application/x-protobuf"
THREADED_JSON_BYTES = 64 << 10
"""JSON bodies larger than this are parsed on a worker thread, not on the event loop."""


def key_digest(key: str) -> bytes:
    """The SHA-256 digest a key is compared and identified by."""
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True)
class ApiKeys:
    """The accepted keys, kept only as digests. A presented key is compared with every one of them in constant time
    (`hmac.compare_digest`), so neither the match nor its position shows in the answer's timing."""

    digests: tuple[bytes, ...]

    @classmethod
    def of(cls, keys: Any) -> ApiKeys:
        """The accepted set of `keys` (at least one: the server always requires a key)."""
        digests = tuple(sorted({key_digest(key) for key in keys}))
        if not digests:
            raise ValueError("ApiKeys needs at least one key")
        return cls(digests)

    def owner(self, key: Optional[str]) -> str:
        """The owner id of a key (a hash, never the key itself); raises PermissionError for a refused key."""
        if not key:
            raise PermissionError("missing X-API-Key header")
        digest = key_digest(key)
        matched = False
        for accepted in self.digests:  # no early exit
            matched |= hmac.compare_digest(digest, accepted)
        if not matched:
            raise PermissionError("the X-API-Key is not one of this server's keys")
        return digest.hex()[:16]


class HttpError(Exception):
    """An error answered with `status` and `{"detail": message}`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _iso(value: Any) -> Optional[str]:
    if value is None:
        return None
    if value.tzinfo is None:  # SQLite returns naive datetimes; they were stored as UTC
        return value.isoformat() + "Z"
    return value.isoformat()


def checkpoint_json(row: CheckpointRow) -> dict[str, Any]:
    """Tinker's `Checkpoint` object."""
    return {
        "checkpoint_id": f"{'weights' if row.kind == 'training' else 'sampler_weights'}/{row.name}",
        "checkpoint_type": row.kind,
        "time": _iso(row.created_at),
        "tinker_path": row.tinker_path,
        "size_bytes": row.size_bytes,
        "public": False,
        "user_metadata": row.user_metadata or None,
        "expires_at": _iso(row.expires_at),
    }


def create_app(
    service: Service,
    keys: ApiKeys,
    poll_seconds: float = 25.0,
    max_body_bytes: int = 64 << 20,
    docs: bool = False,
) -> FastAPI:
    """The FastAPI application serving `service`. Bodies over `max_body_bytes` get 413 however they are sent; `docs`
    turns on FastAPI's `/docs`, `/redoc` and `/openapi.json` (off: they describe the API to anyone who asks)."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.notifier.bind(asyncio.get_running_loop())
        yield

    app = FastAPI(
        title="skyrl-tx",
        version=__version__,
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
    )

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        try:
            return await call_next(request)
        except Exception:  # never die on a request: log it and answer 500
            log.exception("unhandled error on %s %s", request.method, request.url.path)
            return JSONResponse({"detail": "internal server error"}, 500)

    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)  # outermost: counts bytes before anything reads them

    def errors(exc: Exception) -> JSONResponse:
        if isinstance(exc, QuotaExceeded):
            headers = {"retry-after": "1"} if exc.retry else {"x-should-retry": "false"}
            return JSONResponse({"detail": str(exc)}, 429, headers=headers)
        if isinstance(exc, HttpError):
            return JSONResponse({"detail": str(exc)}, exc.status)
        if isinstance(exc, PermissionError):
            return JSONResponse({"detail": str(exc)}, 401)
        if isinstance(exc, NotFound):
            return JSONResponse({"detail": str(exc)}, 404)
        if isinstance(exc, SessionEnded):
            return JSONResponse({"detail": str(exc)}, 410)
        if isinstance(exc, Conflict):
            return JSONResponse({"detail": str(exc)}, 409, headers={"x-should-retry": "false"})
        if isinstance(exc, (UserError, WireError, LossInputError, KeyError, TypeError, ValueError)):
            message = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            return JSONResponse({"detail": message}, 400)
        raise exc

    async def body_json(request: Request) -> dict[str, Any]:
        raw = await request.body()
        try:
            body = await threaded(json.loads, raw) if len(raw) > THREADED_JSON_BYTES else json.loads(raw or b"{}")
        except ValueError as exc:
            raise HttpError(400, f"request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise HttpError(400, "request body must be a JSON object")
        return body

    def route(path: str, method: str = "POST") -> Any:
        """Register an async handler `(owner, request) -> dict | Response` with auth and error mapping."""

        def wrap(handler: Any) -> Any:
            async def endpoint(request: Request) -> Response:
                try:
                    owner = keys.owner(request.headers.get("x-api-key"))
                    result = await handler(owner, request)
                except Exception as exc:  # mapped to a status; unexpected ones reach the middleware
                    return errors(exc)
                return result if isinstance(result, Response) else JSONResponse(result)

            app.add_api_route(f"/api/v1/{path}", endpoint, methods=[method], name=f"{method} {path}")
            return handler

        return wrap

    def threaded(function: Any, *args: Any) -> Any:
        return run_in_threadpool(function, *args)

    async def queue_request(method: Any, owner: str, request: Request, *args: Any) -> Any:
        """Call a queuing service method in a worker thread with the owner, the JSON body, the raw body (whose hash
        tells a retried request from a reused sequence id) and then `args`."""
        raw = await request.body()
        return await threaded(method, owner, await body_json(request), raw, *args)

    def queued_route(path: str, method: Any, *args: Any) -> None:
        """Register a route that queues `method(owner, body, raw, *args)` and answers the request id, and the model
        id when the method returns (request_id, model_id)."""

        async def handler(owner: str, request: Request) -> dict[str, Any]:
            queued = await queue_request(method, owner, request, *args)
            if isinstance(queued, tuple):
                request_id, model_id = queued
                return {"request_id": str(request_id), "model_id": model_id}
            return {"request_id": str(queued)}

        route(path)(handler)

    @app.get("/healthz")
    async def healthz(request: Request) -> dict[str, Any]:
        """`{"status": "ok"}`; with an accepted X-API-Key also that key's waiting requests and adapters in memory."""
        key = request.headers.get("x-api-key")
        if not key:
            return {"status": "ok"}
        try:
            owner = keys.owner(key)
        except PermissionError:
            return {"status": "ok"}
        return {"status": "ok", "version": __version__, **(await threaded(service.status, owner))}

    @route("client/config")
    async def client_config(owner: str, request: Request) -> dict[str, Any]:
        limits = service.limits
        return {
            "pjwt_auth_enabled": False,
            "proto_compress_fwdbwd": False,
            "parallel_fwdbwd_chunks": True,
            # the official client splits forward_backward calls into chunks of at most these many datums and bytes
            # (a datum takes at least 16 bytes per token), and keeps at most this many samples in flight per sampler
            "fwdbwd_max_chunk_len": limits.max_datums,
            "fwdbwd_max_chunk_bytes_count": min(5_000_000, 16 * limits.max_batch_tokens, max_body_bytes // 2),
            "sample_max_concurrent_requests": limits.max_queued_per_key,
        }

    @route("create_session")
    async def create_session(owner: str, request: Request) -> dict[str, Any]:
        session_id = await threaded(service.create_session, owner, await body_json(request))
        return {"type": "create_session", "session_id": session_id}

    @route("session_heartbeat")
    async def session_heartbeat(owner: str, request: Request) -> dict[str, Any]:
        await threaded(service.heartbeat, owner, (await body_json(request))["session_id"])
        return {"type": "session_heartbeat"}

    @route("sessions/{session_id}/finish")
    async def finish_session(owner: str, request: Request) -> dict[str, Any]:
        await body_json(request)  # {reason, detail}: the session ends whatever the reason
        await threaded(service.end_session, owner, request.path_params["session_id"], "finished")
        return {}

    @route("sessions/{session_id}", "GET")
    async def get_session(owner: str, request: Request) -> dict[str, Any]:
        session_id = request.path_params["session_id"]
        row = await threaded(service.session_row, owner, session_id)
        runs, _ = await threaded(service.db.runs_of, owner, 1000, 0, session_id)
        return {
            "session_id": row.session_id,
            "training_run_ids": [run.model_id for run in runs],
            "sampler_ids": [],
            "status": row.status,
        }

    @route("telemetry")
    async def telemetry(owner: str, request: Request) -> dict[str, Any]:
        return {"status": "accepted"}

    @route("get_server_capabilities", "GET")
    async def capabilities(owner: str, request: Request) -> dict[str, Any]:
        models = [
            {
                "model_name": base.name,
                "max_context_length": base.host.max_context,
                "trainable": True,
                "sampleable": True,
            }
            for base in service.base_models.values()
            if base.host is not None
        ]
        return {"supported_models": models}

    queued_route("create_model", service.create_model)
    queued_route("optim_step", service.optim_step)
    queued_route("save_weights", service.save, False)
    queued_route("save_weights_for_sampler", service.save, True)
    queued_route("load_weights", service.load_weights)

    @route("get_info")
    async def get_info(owner: str, request: Request) -> dict[str, Any]:
        return await threaded(service.get_info, owner, (await body_json(request))["model_id"])

    @route("forward_backward")
    async def forward_backward(owner: str, request: Request) -> dict[str, Any]:
        raw = await request.body()
        if request.headers.get("content-encoding", "").lower() == "zstd":
            raise HttpError(
                415, "zstd-compressed bodies are not accepted; this server sets proto_compress_fwdbwd=false"
            )
        if PROTO not in request.headers.get("content-type", ""):
            raise HttpError(415, f"forward_backward bodies must be {PROTO} (tinker client 0.25 or later)")
        call = await threaded(decode_forward_backward, raw, service.limits.max_datums)
        request_id = await threaded(service.forward_backward, owner, call, raw)
        return {"request_id": str(request_id), "model_id": call.model_id}

    @route("create_sampling_session")
    async def create_sampling_session(owner: str, request: Request) -> dict[str, Any]:
        sampling_id = await threaded(service.create_sampling_session, owner, await body_json(request))
        return {"type": "create_sampling_session", "sampling_session_id": sampling_id}

    @route("samplers/{sampler_id}", "GET")
    async def get_sampler(owner: str, request: Request) -> dict[str, Any]:
        row = await threaded(service.sampler, owner, request.path_params["sampler_id"])
        return {"sampler_id": row.sampling_session_id, "base_model": row.base_model, "model_path": row.model_path}

    @route("asample")
    async def asample(owner: str, request: Request) -> dict[str, Any]:
        request_id, count = await queue_request(service.asample, owner, request)
        return {"request_id": str(request_id), "sample_sequence_ids": [f"{request_id}:{i}" for i in range(count)]}

    @route("retrieve_future")
    async def retrieve_future(owner: str, request: Request) -> Response | dict[str, Any]:
        raw_id = (await body_json(request)).get("request_id")
        if not str(raw_id).isdigit():
            raise NotFound(f"request {raw_id!r} not found")
        request_id = int(raw_id)
        deadline = asyncio.get_running_loop().time() + poll_seconds
        row = await threaded(service.futures.get, request_id)
        if row is None or row.owner != owner:  # checked before any event exists for the id
            raise NotFound(f"request {raw_id!r} not found")
        while True:
            if row.status == DONE:
                if row.result_is_proto:
                    return Response(content=row.result, media_type=PROTO)
                return JSONResponse(json.loads(row.result))
            if row.status == FAILED:
                return {"error": row.error, "category": row.error_category or "unknown"}
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return {"type": "try_again", "request_id": str(request_id), "queue_state": "active"}
            with service.notifier.watch(request_id) as event:  # dropped when the poll returns
                row = await threaded(service.futures.get, request_id)  # read after watching: no wake-up is lost
                if row.status not in (DONE, FAILED):
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(event.wait(), timeout=remaining)
                    row = await threaded(service.futures.get, request_id)

    # ----- training runs and checkpoints ---------------------------------------------------------------------------
    def run_json(row: ModelRow, checkpoints: list[CheckpointRow]) -> dict[str, Any]:
        training = [c for c in checkpoints if c.kind == "training"]
        sampler = [c for c in checkpoints if c.kind == "sampler"]
        return {
            "training_run_id": row.model_id,
            "base_model": row.base_model,
            "model_owner": row.owner,
            "is_lora": True,
            "corrupted": row.status in ("lost", "failed"),
            "lora_rank": row.lora_config.get("rank"),
            "last_request_time": _iso(row.last_request_at),
            "last_checkpoint": checkpoint_json(training[0]) if training else None,
            "last_sampler_checkpoint": checkpoint_json(sampler[0]) if sampler else None,
            "user_metadata": row.user_metadata or None,
        }

    def page(request: Request, default_limit: int) -> tuple[int, int]:
        try:
            limit = int(request.query_params.get("limit", default_limit))
            offset = int(request.query_params.get("offset", 0))
        except ValueError:
            raise HttpError(400, "limit and offset must be integers") from None
        if not 1 <= limit <= 1000 or offset < 0:
            raise HttpError(400, f"limit must be in [1, 1000] and offset >= 0, got {limit}, {offset}")
        return limit, offset

    @route("training_runs", "GET")
    async def training_runs(owner: str, request: Request) -> dict[str, Any]:
        limit, offset = page(request, 20)
        rows, total = await threaded(service.db.runs_of, owner, limit, offset)
        runs = []
        for row in rows:
            checkpoints, _ = await threaded(service.db.checkpoints_of, owner, row.model_id, 1000, 0)
            runs.append(run_json(row, checkpoints))
        return {"training_runs": runs, "cursor": {"offset": offset, "limit": limit, "total_count": total}}

    @route("training_runs/{run_id}", "GET")
    async def training_run(owner: str, request: Request) -> dict[str, Any]:
        row = await threaded(service.model_row, owner, request.path_params["run_id"])
        checkpoints, _ = await threaded(service.db.checkpoints_of, owner, row.model_id, 1000, 0)
        return run_json(row, checkpoints)

    @route("training_runs/{run_id}/checkpoints", "GET")
    async def run_checkpoints(owner: str, request: Request) -> dict[str, Any]:
        row = await threaded(service.model_row, owner, request.path_params["run_id"])
        checkpoints, total = await threaded(service.db.checkpoints_of, owner, row.model_id, 1000, 0)
        return {"checkpoints": [checkpoint_json(c) for c in checkpoints]}

    @route("checkpoints", "GET")
    async def user_checkpoints(owner: str, request: Request) -> dict[str, Any]:
        limit, offset = page(request, 100)
        checkpoints, total = await threaded(service.db.checkpoints_of, owner, None, limit, offset)
        return {
            "checkpoints": [checkpoint_json(c) for c in checkpoints],
            "cursor": {"offset": offset, "limit": limit, "total_count": total},
        }

    @route("training_runs/{run_id}/checkpoints/{checkpoint:path}", "DELETE")
    async def delete_checkpoint(owner: str, request: Request) -> Response:
        params = request.path_params
        await threaded(service.delete_checkpoint, owner, params["run_id"], params["checkpoint"])
        return Response(status_code=204)

    @route("weights_info")
    async def weights_info(owner: str, request: Request) -> dict[str, Any]:
        path = (await body_json(request))["tinker_path"]
        _, folder, _ = await threaded(service.checkpoint, owner, path)
        meta = read_meta(folder)
        lora = meta["lora"]
        return {
            "base_model": meta["base_model"],
            "is_lora": True,
            "lora_rank": lora["rank"],
            "train_unembed": lora["train_unembed"],
            "train_mlp": lora["train_mlp"],
            "train_attn": lora["train_attn"],
        }

    return app
