"""BodySizeLimit against a real uvicorn server on 127.0.0.1: declared and chunked bodies over the cap get 413."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from skyrl_train.serving.background import BackgroundServer
from skyrl_train.serving.body_limit import BodySizeLimit
from skyrl_train.workers.distributed import free_port

CAP = 64 * 1024


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, list[int]]]:
    """An app that reads whole bodies behind a catch-all 500 handler (as skyrl-tx has), capped at CAP bytes."""
    seen: list[int] = []
    app = FastAPI()

    @app.middleware("http")
    async def catch_all(request: Request, call_next):  # type: ignore[no-untyped-def]
        try:
            return await call_next(request)
        except Exception:
            return JSONResponse({"detail": "internal server error"}, 500)

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        body = await request.body()
        seen.append(len(body))
        return {"bytes": len(body)}

    background = BackgroundServer(BodySizeLimit(app, CAP), "127.0.0.1", free_port()).start()
    yield f"http://127.0.0.1:{background.port}", seen
    background.stop()


def _chunks(total: int, size: int = 8192) -> Iterator[bytes]:
    for start in range(0, total, size):
        yield b"x" * min(size, total - start)


@pytest.mark.integration
def test_bodies_under_the_cap_pass_whole(server: tuple[str, list[int]]) -> None:
    url, _ = server
    declared = httpx.post(f"{url}/echo", content=b"x" * CAP)
    chunked = httpx.post(f"{url}/echo", content=_chunks(CAP - 1))
    assert (declared.status_code, declared.json()) == (200, {"bytes": CAP})
    assert (chunked.status_code, chunked.json()) == (200, {"bytes": CAP - 1})


@pytest.mark.integration
def test_a_declared_length_over_the_cap_is_refused_before_the_app_reads(server: tuple[str, list[int]]) -> None:
    url, seen = server
    before = len(seen)
    response = httpx.post(f"{url}/echo", content=b"x" * (CAP + 1))
    assert response.status_code == 413
    assert str(CAP) in response.json()["detail"]
    assert len(seen) == before


@pytest.mark.integration
def test_a_chunked_body_over_the_cap_is_refused_and_never_reaches_the_handler(server: tuple[str, list[int]]) -> None:
    url, seen = server
    before = len(seen)
    # No Content-Length: httpx sends a generator with chunked transfer encoding, as the review's probe did.
    response = httpx.post(f"{url}/echo", content=_chunks(4 * CAP))
    assert response.status_code == 413
    assert f"limit of {CAP} bytes" in response.json()["detail"]
    assert len(seen) == before
    # The server keeps answering afterwards.
    assert httpx.post(f"{url}/echo", content=b"ok").json() == {"bytes": 2}


def test_the_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_bytes must be >= 1"):
        BodySizeLimit(FastAPI(), 0)
