"""Tests of the BM25 retrieval server: corpus validation, ranking, the HTTP API, background start/stop and the CLI."""

import json
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from skyrl_gym.tools import retrieval_server
from skyrl_gym.tools.retrieval_server import BM25Index, Document, RetrievalServer, create_app, load_corpus
from skyrl_gym.tools.search import SearchToolGroup

CORPUS = [
    {"id": "paris", "title": "Paris", "text": "Paris is the capital and largest city of France."},
    {"id": 2, "contents": '"Berlin"\nBerlin is the capital of Germany.'},
    {"id": "banana", "title": "Banana", "text": "Bananas are long yellow fruit."},
    {"id": "nile", "title": "Nile", "text": "The Nile is a river in Africa, flowing north into the sea."},
]


def write_jsonl(path: Path, records) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl", CORPUS[:2] + [""] + CORPUS[2:])  # a blank line is skipped


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    path = write_jsonl(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", CORPUS)
    with RetrievalServer(path) as server:
        yield server


def test_load_corpus_reads_text_contents_and_titles(corpus_file):
    docs = load_corpus(corpus_file)
    assert [d.id for d in docs] == ["paris", 2, "banana", "nile"]
    assert docs[1] == Document(2, "Berlin", "Berlin is the capital of Germany.")
    assert docs[0].title == "Paris"


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('{"id": "x", "text": ', "line 2: not valid JSON"),
        ('["id", "text"]', "line 2: expected a JSON object, got list"),
        ('{"title": "t", "text": "no id"}', "line 2: field 'id' must be a string or an integer, got None"),
        ('{"id": true, "text": "bool id"}', "line 2: field 'id' must be a string or an integer, got True"),
        ('{"id": "x", "title": 5, "text": "t"}', "line 2: field 'title' must be a string, got int"),
        ('{"id": "x", "body": "t"}', "line 2: missing field 'text' (or 'contents')"),
        ('{"id": "x", "text": ["t"]}', "line 2: field 'text' must be a string, got list"),
        ('{"id": "x", "contents": 7}', "line 2: field 'contents' must be a string, got int"),
        ('{"id": "paris", "text": "dup"}', "line 2: field 'id' 'paris' repeats line 1"),
    ],
)
def test_bad_corpus_lines_are_rejected_with_line_and_field(tmp_path, bad_line, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [CORPUS[0], bad_line])
    with pytest.raises(ValueError) as info:
        load_corpus(path)
    assert str(info.value).startswith(f"{path} {message}")


def test_empty_or_missing_corpus(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="holds no documents"):
        load_corpus(empty)
    with pytest.raises(ValueError, match="does not exist"):
        load_corpus(tmp_path / "absent.jsonl")


def test_bm25_ranking_and_zero_score_filtering(corpus_file):
    index = BM25Index(load_corpus(corpus_file))
    (france,), (germany,), (nothing,), (everything,) = (
        index.search([q], topk=10) for q in ["capital of France", "Germany capital", "quantum chromodynamics", "the"]
    )
    assert [d.id for d, _ in france] == ["paris", 2]  # both mention "capital"; only Paris mentions France
    assert france[0][1] > france[1][1] > 0
    assert [d.id for d, _ in germany] == [2, "paris"]
    assert nothing == [] and everything == []  # no shared terms (and "the" is a stop word)
    assert len(index.search(["capital"], topk=1)[0]) == 1
    assert index.search([], topk=3) == []


def test_a_search_starts_no_thread(monkeypatch):
    # bm25s starts and joins a thread pool per call for any n_threads but 0: a thread per request on a busy server
    index = BM25Index([Document(id=record["id"], title="", text=record["text"]) for record in CORPUS[::2]])
    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda thread: (started.append(thread.name), start(thread))[1])
    for _ in range(5):
        assert index.search(["river in Africa", "yellow fruit"], topk=1)[1][0][0].id == "banana"
    assert started == []


class _ThreadRecordingIndex(BM25Index):
    """A BM25Index that records the name of each thread its searches run in."""

    threads: list[str]

    def search(self, queries: list[str], topk: int) -> list[list[tuple[Document, float]]]:
        self.threads.append(threading.current_thread().name)
        return super().search(queries, topk)


@pytest.mark.parametrize(
    "inline_max, in_thread, expect_worker",
    [(4, None, False), (3, None, True), (4, True, True), (3, False, False)],
)
def test_small_indexes_are_searched_on_the_event_loop_and_large_ones_in_a_worker(
    monkeypatch, inline_max, in_thread, expect_worker
):
    from fastapi.testclient import TestClient

    monkeypatch.setattr(retrieval_server, "INLINE_SEARCH_MAX_DOCUMENTS", inline_max)
    index = _ThreadRecordingIndex([Document(id=r["id"], title="", text=r.get("text", "")) for r in CORPUS])
    index.threads = []
    with TestClient(create_app(index, search_in_thread=in_thread)) as client:
        loop_thread = client.portal.call(lambda: threading.current_thread().name)
        assert client.post("/retrieve", json={"query": "yellow fruit"}).json()["result"][0][0]["id"] == "banana"
    assert len(index.threads) == 1
    assert (index.threads[0] != loop_thread) is expect_worker


@pytest.mark.integration
def test_http_api(corpus_file):
    with RetrievalServer(corpus_file) as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{server.url}/health").json() == {"status": "ok", "documents": 4, "delay_ms": [0.0, 0.0]}
        single = httpx.post(f"{server.url}/retrieve", json={"query": "river in Africa", "topk": 2}).json()
        assert single == {"result": [[{"id": "nile", "title": "Nile", "text": CORPUS[3]["text"]}]]}
        scored = httpx.post(
            f"{server.url}/retrieve", json={"queries": ["yellow fruit", "capital France"], "return_scores": True}
        ).json()["result"]
        assert [[item["id"] for item in hits] for hits in scored] == [["banana"], ["paris", 2]]
        assert all(isinstance(item["score"], float) and item["score"] > 0 for hits in scored for item in hits)


def test_a_delayed_server_waits_like_a_remote_api_before_answering(corpus_file):
    import time

    with pytest.raises(ValueError, match="delay_s must be"):
        RetrievalServer(corpus_file, delay_s=(0.3, 0.2)).start()
    with RetrievalServer(corpus_file, delay_s=(0.2, 0.25)) as server:
        assert httpx.get(f"{server.url}/health").json()["delay_ms"] == [200.0, 250.0]
        start = time.perf_counter()
        hits = httpx.post(f"{server.url}/retrieve", json={"query": "river in Africa"}).json()["result"]
        assert time.perf_counter() - start >= 0.2  # a lower bound: the server sleeps at least the minimum delay
        assert hits[0][0]["id"] == "nile"


@pytest.mark.integration
@pytest.mark.parametrize(
    "body, field",
    [
        ({"query": "x", "topk": 0}, "topk"),
        ({"query": "x", "topk": 101}, "topk"),
        ({"query": "x", "topk": "3"}, "topk"),
        ({"query": 5}, "query"),
        ({"queries": []}, "queries"),
        ({"queries": ["ok", 3]}, "queries"),
        ({"query": "x", "return_scores": "yes"}, "return_scores"),
        ({"query": "x", "top_k": 3}, "top_k"),
        ({"query": "x" * 4097}, "query"),
        ({"queries": ["ok", "x" * 4097]}, "queries"),
    ],
)
def test_invalid_requests_get_422_naming_the_field(shared_server, body, field):
    response = httpx.post(f"{shared_server.url}/retrieve", json=body)
    assert response.status_code == 422
    assert field in response.json()["detail"][0]["loc"]


@pytest.mark.integration
def test_a_body_past_the_cap_gets_413_even_when_it_streams_without_a_length(corpus_file):
    # security review #22: the body was read whole whatever its size
    with RetrievalServer(corpus_file, max_body_bytes=1000) as server:
        url = f"{server.url}/retrieve"
        big = json.dumps({"query": "x" * 2000}).encode()
        declared = httpx.post(url, content=big, headers={"content-type": "application/json"})
        assert declared.status_code == 413
        assert declared.json() == {"detail": "the request body passed the 1000-byte cap (--max-body-bytes)"}

        def chunks():
            for start in range(0, len(big), 100):
                yield big[start : start + 100]

        streamed = httpx.post(url, content=chunks(), headers={"content-type": "application/json"})
        assert streamed.request.headers.get("transfer-encoding") == "chunked"  # no length to check up front
        assert "content-length" not in streamed.request.headers and streamed.status_code == 413
        assert httpx.post(url, json={"query": "capital"}).status_code == 200  # a normal request still works


@pytest.mark.integration
@pytest.mark.parametrize("body", [{"topk": 2}, {"query": "a", "queries": ["b"]}])
def test_exactly_one_of_query_and_queries(shared_server, body):
    response = httpx.post(f"{shared_server.url}/retrieve", json=body)
    assert response.status_code == 422
    assert "exactly one of 'query' (a string) or 'queries'" in response.json()["detail"][0]["msg"]


@pytest.mark.integration
def test_stop_closes_the_port_and_the_client_sees_it(corpus_file):
    server = RetrievalServer(corpus_file).start()
    group = SearchToolGroup(server.url, topk=1, max_attempts=2, backoff_base_s=0.01)
    assert group.call("search", {"query": "largest city"}).output == (
        "Doc 1 (Title: Paris): Paris is the capital and largest city of France."
    )
    server.stop()
    server.stop()  # idempotent
    after = group.call("search", {"query": "largest city"})
    group.close()
    assert not after.ok and after.error.startswith(f"search server unavailable at {server.url}/retrieve")
    with pytest.raises(RuntimeError, match="already started"):
        started = RetrievalServer([Document("a", "", "alpha beta")]).start()
        try:
            started.start()
        finally:
            started.stop()


@pytest.mark.integration
def test_command_line_server(corpus_file):
    command = [sys.executable, "-m", "skyrl_gym.tools.retrieval_server", "--corpus", str(corpus_file), "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first_line = process.stdout.readline().strip()
        assert first_line.startswith("serving 4 documents at http://127.0.0.1:"), process.stderr.read()
        url = first_line.rsplit(" ", 1)[1]
        reply = httpx.post(f"{url}/retrieve", json={"query": "Germany", "topk": 1}, timeout=10).json()
        assert reply["result"][0][0]["id"] == 2
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.integration
def test_command_line_rejects_a_bad_corpus(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [CORPUS[0], '{"id": "y"}'])
    command = [sys.executable, "-m", "skyrl_gym.tools.retrieval_server", "--corpus", str(bad), "--port", "0"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 2
    assert f"{bad} line 2: missing field 'text'" in finished.stderr
