"""A BM25 retrieval server over a jsonl corpus: `POST /retrieve` and `GET /health`, for the `search` env.

Run it with `python -m skyrl_gym.tools.retrieval_server --corpus FILE --port N [--host 127.0.0.1]` (port 0 picks a
free port; the first line printed is `serving N documents at URL`), or from Python with
`RetrievalServer(corpus).start()` in a background thread, as the tests do.

Corpus: one JSON object a line, `{"id": str | int, "title": str (optional), "text": str}`; `"contents"` may stand in
for `"text"`, and a contents of the form `"Title"\\ntext` (Search-R1 / FlashRAG corpora) gives the title too.

API: `POST /retrieve` with `{"query": str}` or `{"queries": [str, ...]}`, `"topk": int` (default 3) and
`"return_scores": bool` (default false) returns `{"result": [[{"id", "title", "text", "score"?}, ...], ...]}`, one
list per query, best first, holding only documents that share a term with the query. Bad requests get HTTP 422 with
a message naming the field. The server has no authentication and binds 127.0.0.1 by default; its input is capped:
at most `MAX_QUERIES` queries of `MAX_QUERY_CHARS` characters, `topk` <= `MAX_TOPK`, and a body of at most
`--max-body-bytes` (default `DEFAULT_MAX_BODY_BYTES`), counted as it streams in (a chunked body too): past it the
answer is 413 and nothing more is read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional, Union

import bm25s
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

MAX_TOPK = 100
MAX_QUERIES = 256
MAX_QUERY_CHARS = 4096
DEFAULT_TOPK = 3
DEFAULT_MAX_BODY_BYTES = 2_000_000
"""Default cap on a request body (`--max-body-bytes`): room for `MAX_QUERIES` queries of `MAX_QUERY_CHARS`."""
INLINE_SEARCH_MAX_DOCUMENTS = 5_000
"""Up to this many documents `/retrieve` searches on the event loop's own thread: a search then takes about a
millisecond (bm25s scores every document, about 0.15 us each here), less than handing it to a worker thread costs.
A larger index is searched in a worker thread, so a slow search does not hold up other requests' parsing and waits."""


@dataclass(frozen=True)
class Document:
    """One corpus passage."""

    id: Union[str, int]
    title: str
    text: str


def _parse_corpus_line(record: Any, where: str) -> Document:
    """Check one decoded corpus line and build its Document; ValueError naming `where` and the field."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    doc_id = record.get("id")
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
        raise ValueError(f"{where}: field 'id' must be a string or an integer, got {doc_id!r}")
    title = record.get("title", "")
    if title is None:
        title = ""
    if not isinstance(title, str):
        raise ValueError(f"{where}: field 'title' must be a string, got {type(title).__name__}")
    if "text" in record:
        field, text = "text", record["text"]
    elif "contents" in record:
        field, text = "contents", record["contents"]
    else:
        raise ValueError(f"{where}: missing field 'text' (or 'contents'); keys are {sorted(record)}")
    if not isinstance(text, str):
        raise ValueError(f"{where}: field '{field}' must be a string, got {type(text).__name__}")
    if field == "contents" and not title and text.startswith('"') and '"\n' in text:
        title, text = text[1:].split('"\n', 1)
    return Document(doc_id, title, text)


def load_corpus(path: Union[str, Path]) -> list[Document]:
    """Read a jsonl corpus; a bad line raises ValueError naming the file, the line number and the field."""
    corpus_path = Path(path)
    if not corpus_path.is_file():
        raise ValueError(f"corpus file {corpus_path} does not exist")
    documents: list[Document] = []
    first_line_of: dict[Union[str, int], int] = {}
    with corpus_path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{corpus_path} line {line_number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
            document = _parse_corpus_line(record, where)
            if document.id in first_line_of:
                raise ValueError(f"{where}: field 'id' {document.id!r} repeats line {first_line_of[document.id]}")
            first_line_of[document.id] = line_number
            documents.append(document)
    if not documents:
        raise ValueError(f"corpus file {corpus_path} holds no documents")
    return documents


class BM25Index:
    """A `bm25s` index over documents (title and text), with English stop words removed."""

    def __init__(self, documents: list[Document], k1: float = 1.5, b: float = 0.75) -> None:
        if not documents:
            raise ValueError("BM25Index needs at least one document")
        self.documents = list(documents)
        tokens = bm25s.tokenize(
            [f"{doc.title}\n{doc.text}" for doc in self.documents], stopwords="en", show_progress=False
        )
        self._retriever = bm25s.BM25(k1=k1, b=b)
        self._retriever.index(tokens, show_progress=False)
        self._lock = threading.Lock()

    def search(self, queries: list[str], topk: int) -> list[list[tuple[Document, float]]]:
        """The best `topk` (document, score) pairs per query, best first; documents scoring 0 are left out."""
        if not queries:
            return []
        k = min(topk, len(self.documents))
        query_tokens = bm25s.tokenize(queries, stopwords="en", return_ids=False, show_progress=False)
        # n_threads=0 scores the queries here; any other value makes bm25s start (and join) a thread pool per call
        with self._lock:
            indices, scores = self._retriever.retrieve(query_tokens, k=k, show_progress=False, n_threads=0)
        results = []
        for row_indices, row_scores in zip(indices.tolist(), scores.tolist()):
            results.append([(self.documents[i], float(s)) for i, s in zip(row_indices, row_scores) if s > 0])
        return results


class RetrieveRequest(BaseModel):
    """The body of `POST /retrieve`: exactly one of `query` / `queries`, plus `topk` and `return_scores`."""

    model_config = ConfigDict(extra="forbid")

    query: Optional[StrictStr] = Field(default=None, max_length=MAX_QUERY_CHARS)
    queries: Optional[list[Annotated[StrictStr, Field(max_length=MAX_QUERY_CHARS)]]] = Field(
        default=None, min_length=1, max_length=MAX_QUERIES
    )
    topk: StrictInt = Field(default=DEFAULT_TOPK, ge=1, le=MAX_TOPK)
    return_scores: StrictBool = False

    @model_validator(mode="after")
    def _exactly_one_query_field(self) -> RetrieveRequest:
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of 'query' (a string) or 'queries' (a list of strings)")
        return self


class BodyCap:
    """ASGI middleware: answer 413 once a request body passes `limit` bytes, counting the bytes as they arrive (a
    chunked body has no Content-Length to check up front), and read nothing more of it."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = False
        received = 0

        async def refuse() -> None:
            nonlocal refused
            refused = True
            body = json.dumps({"detail": f"the request body passed the {self.limit}-byte cap (--max-body-bytes)"})
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 413, "headers": headers})
            await send({"type": "http.response.body", "body": body.encode()})

        async def counted_receive() -> dict:
            nonlocal received
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    await refuse()
                    return {"type": "http.disconnect"}  # the app stops reading; its own answer is dropped below
            return message

        async def guarded_send(message: dict) -> None:
            if not refused:
                await send(message)

        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await refuse()
            return
        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:
            if not refused:
                raise


def create_app(
    index: BM25Index,
    delay_s: tuple[float, float] = (0.0, 0.0),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    search_in_thread: Optional[bool] = None,
) -> FastAPI:
    """The FastAPI application serving `index`; each `/retrieve` first waits a uniform random time in `delay_s`
    (seconds), as a remote search API would (for benchmarks of rollouts that wait on the outside world). Request
    bodies past `max_body_bytes` get 413 (`BodyCap`). Searches run in a worker thread with `search_in_thread`, on the
    event loop without it; None (the default) picks the thread for an index of more than `INLINE_SEARCH_MAX_DOCUMENTS`
    documents."""
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be a positive integer, got {max_body_bytes!r}")
    low, high = delay_s
    if not 0.0 <= low <= high:
        raise ValueError(f"delay_s must be (min, max) with 0 <= min <= max, got {delay_s}")
    app = FastAPI(title="skyrl-gym BM25 retrieval server", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(BodyCap, limit=max_body_bytes)
    jitter = random.Random(0)
    if search_in_thread is None:
        search_in_thread = len(index.documents) > INLINE_SEARCH_MAX_DOCUMENTS

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "documents": len(index.documents), "delay_ms": [low * 1000, high * 1000]}

    @app.post("/retrieve")
    async def retrieve(request: RetrieveRequest) -> dict[str, Any]:
        if high > 0:
            await asyncio.sleep(jitter.uniform(low, high))
        return await asyncio.to_thread(_answer, request) if search_in_thread else _answer(request)

    def _answer(request: RetrieveRequest) -> dict[str, Any]:
        queries = [request.query] if request.query is not None else list(request.queries or [])
        result = []
        for hits in index.search(queries, request.topk):
            items = []
            for document, score in hits:
                item: dict[str, Any] = {"id": document.id, "title": document.title, "text": document.text}
                if request.return_scores:
                    item["score"] = score
                items.append(item)
            result.append(items)
        return {"result": result}

    return app


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); port 0 lets the OS pick a free one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class RetrievalServer:
    """The retrieval server on a background thread: `start()` it, use `url`, `stop()` it (or use `with`).

    `corpus` is a jsonl path, a list of Documents, or a ready BM25Index. With port 0 the OS picks a free port.
    `delay_s=(min, max)` makes every `/retrieve` wait a uniform random time in that range first. Bodies past
    `max_body_bytes` get 413.
    """

    def __init__(
        self,
        corpus: Union[str, Path, list[Document], BM25Index],
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        delay_s: tuple[float, float] = (0.0, 0.0),
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.delay_s = delay_s
        self.max_body_bytes = max_body_bytes
        if isinstance(corpus, BM25Index):
            self.index = corpus
        else:
            self.index = BM25Index(corpus if isinstance(corpus, list) else load_corpus(corpus))
        self.host = host
        self.requested_port = port
        self.port: Optional[int] = None
        self._log_level = log_level
        self._server: Optional[uvicorn.Server] = None
        self._thread: Optional[threading.Thread] = None
        self._socket: Optional[socket.socket] = None

    @property
    def url(self) -> str:
        """The base URL, e.g. "http://127.0.0.1:41234" (the client POSTs to `url + "/retrieve"`)."""
        if self.port is None:
            raise RuntimeError("RetrievalServer is not started")
        return _url(self.host, self.port)

    def start(self, timeout_s: float = 10.0) -> RetrievalServer:
        """Bind, serve on a daemon thread, and return once the server accepts requests."""
        if self._thread is not None:
            raise RuntimeError("RetrievalServer is already started")
        sock = self._socket = _bind(self.host, self.requested_port)
        self.port = sock.getsockname()[1]
        # log_config=None: leave the host process's logging setup alone; only the uvicorn loggers' level is set
        config = uvicorn.Config(
            create_app(self.index, self.delay_s, self.max_body_bytes),
            log_config=None,
            log_level=self._log_level,
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"retrieval-server-{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                self.stop()
                raise RuntimeError(f"retrieval server on {self.url} stopped during start-up")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"retrieval server on {self.url} did not start within {timeout_s} s")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the server to exit and wait for its thread. Safe to call more than once."""
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout_s)
        if self._socket is not None:
            self._socket.close()
        self._socket = None
        self._server = None
        self._thread = None

    def __enter__(self) -> RetrievalServer:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def main(argv: Optional[list[str]] = None) -> int:
    """Command-line entry: load the corpus, build the index and serve until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_gym.tools.retrieval_server", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--corpus", required=True, help="jsonl file, one {id, title?, text|contents} object a line")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (0 picks a free one); default 8000")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on; default 127.0.0.1")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level; default warning")
    parser.add_argument(
        "--delay-ms",
        default="0",
        help="wait before answering each /retrieve, like a remote API: N, or MIN-MAX for a uniform random wait",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"answer 413 to a request body past this many bytes; default {DEFAULT_MAX_BODY_BYTES}",
    )
    args = parser.parse_args(argv)
    if args.max_body_bytes < 1:
        parser.error(f"--max-body-bytes must be a positive integer, got {args.max_body_bytes}")
    try:
        low, _, high = args.delay_ms.partition("-")
        delay_s = (float(low) / 1000, float(high or low) / 1000)
    except ValueError:
        parser.error(f"--delay-ms must be N or MIN-MAX in milliseconds, got {args.delay_ms!r}")
    try:
        index = BM25Index(load_corpus(args.corpus))
        sock = _bind(args.host, args.port)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    print(f"serving {len(index.documents)} documents at {_url(args.host, port)}", flush=True)
    try:
        app = create_app(index, delay_s, args.max_body_bytes)
    except ValueError as exc:
        print(f"error: --delay-ms: {exc}", file=sys.stderr)
        return 2
    config = uvicorn.Config(app, log_level=args.log_level, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
