"""Tests of the search tool group's HTTP client against tiny real HTTP servers: retries, backoff, failures."""

import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skyrl_gym.tools.search import SearchToolGroup, format_documents, retrieve_endpoint

GOOD_BODY = {
    "result": [
        [
            {"id": "a", "title": "Paris", "text": "Paris is in France."},
            {"id": "b", "title": "", "text": "Untitled passage."},
        ]
    ]
}


class ScriptedServer:
    """A real HTTP server on 127.0.0.1 that answers POST /retrieve with scripted (status, body, delay) replies.

    The last reply repeats once the script runs out; every request body is recorded.
    """

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server naming)
                length = int(self.headers.get("Content-Length", 0))
                owner.requests.append((self.path, json.loads(self.rfile.read(length))))
                index = min(len(owner.requests), len(owner.replies)) - 1
                status, body, delay = owner.replies[index]
                time.sleep(delay)
                payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.integration
def test_retries_two_server_errors_then_succeeds():
    with ScriptedServer([(500, "boom", 0), (503, "busy", 0), (200, GOOD_BODY, 0)]) as server:
        group = SearchToolGroup(server.url, topk=2, max_attempts=4, backoff_base_s=0.01)
        result = group.call("search", {"query": "capital of France"})
        group.close()
    assert result.ok
    assert result.output == "Doc 1 (Title: Paris): Paris is in France.\nDoc 2: Untitled passage."
    assert len(server.requests) == 3
    assert server.requests[0] == ("/retrieve", {"query": "capital of France", "topk": 2, "return_scores": False})


@pytest.mark.integration
def test_backoff_doubles_between_attempts():
    with ScriptedServer([(500, "boom", 0)]) as server:
        group = SearchToolGroup(server.url, max_attempts=3, backoff_base_s=0.1)
        start = time.monotonic()
        result = group.call("search", {"query": "x"})
        elapsed = time.monotonic() - start
        group.close()
    assert elapsed >= 0.1 + 0.2  # two sleeps: base, then twice base
    assert result.error == f"search server unavailable at {server.url}/retrieve after 3 attempts: HTTP 500: boom"
    assert len(server.requests) == 3


@pytest.mark.integration
def test_backoff_is_capped():
    with ScriptedServer([(502, "bad gateway", 0)]) as server:
        group = SearchToolGroup(server.url, max_attempts=3, backoff_base_s=5.0, backoff_max_s=0.05)
        start = time.monotonic()
        assert not group.call("search", {"query": "x"}).ok
        assert time.monotonic() - start < 2.0
        group.close()


@pytest.mark.integration
def test_unreachable_server_gives_a_clear_error(closed_port_url):
    url = closed_port_url
    group = SearchToolGroup(url, max_attempts=2, backoff_base_s=0.01)
    result = group.call("search", {"query": "anything"})
    group.close()
    assert not result.ok and result.service_error
    assert result.error.startswith(f"search server unavailable at {url}/retrieve after 2 attempts: ConnectError")
    assert result.text.startswith("Error: search server unavailable")


@pytest.mark.integration
def test_read_timeout_is_retried():
    with ScriptedServer([(200, GOOD_BODY, 0.6), (200, GOOD_BODY, 0)]) as server:
        group = SearchToolGroup(server.url, timeout_s=0.2, max_attempts=2, backoff_base_s=0.01)
        result = group.call("search", {"query": "slow"})
        group.close()
    assert result.ok and len(server.requests) == 2


@pytest.mark.integration
def test_client_errors_are_not_retried():
    detail = {"detail": [{"loc": ["body", "topk"], "msg": "Input should be less than or equal to 100"}]}
    with ScriptedServer([(422, detail, 0)]) as server:
        group = SearchToolGroup(server.url, topk=500, max_attempts=3, backoff_base_s=0.01)
        result = group.call("search", {"query": "x"})
        group.close()
    assert len(server.requests) == 1 and result.service_error
    assert result.error.startswith(f"search server at {server.url}/retrieve rejected the query (HTTP 422): ")
    assert "topk" in result.error


@pytest.mark.integration
@pytest.mark.parametrize("body", ["not json", {"results": []}, {"result": [{"id": 1}]}, {"result": [[{"id": 1}]]}])
def test_malformed_responses_are_reported(body):
    with ScriptedServer([(200, body, 0)]) as server:
        group = SearchToolGroup(server.url, max_attempts=1)
        result = group.call("search", {"query": "x"})
        group.close()
    assert not result.ok and "sent an unexpected response" in result.error and result.service_error


@pytest.mark.integration
def test_empty_result_list_is_said_plainly():
    with ScriptedServer([(200, {"result": [[]]}, 0)]) as server:
        group = SearchToolGroup(server.url)
        result = group.call("search", {"query": "nothing matches"})
        group.close()
    assert result.ok and result.output == "No documents matched the query." and not result.service_error


@pytest.mark.integration
def test_empty_query_is_refused_without_a_request():
    with ScriptedServer([(200, GOOD_BODY, 0)]) as server:
        group = SearchToolGroup(server.url)
        result = group.call("search", {"query": "   "})
        group.close()
    assert result.error == "the search query is empty" and server.requests == []
    assert not result.service_error  # the caller's fault, not the server's


@pytest.mark.integration
def test_search_url_may_already_name_the_endpoint():
    with ScriptedServer([(200, GOOD_BODY, 0)]) as server:
        group = SearchToolGroup(f"{server.url}/retrieve/")
        assert group.call("search", {"query": "x"}).ok
        group.close()
    assert server.requests[0][0] == "/retrieve"


def test_retrieve_endpoint():
    assert retrieve_endpoint("http://h:8000") == "http://h:8000/retrieve"
    assert retrieve_endpoint("http://h:8000/") == "http://h:8000/retrieve"
    assert retrieve_endpoint("https://h/api/retrieve") == "https://h/api/retrieve"
    with pytest.raises(ValueError, match="http"):
        retrieve_endpoint("h:8000")


def test_format_documents_hand_worked():
    assert format_documents([{"title": "A", "text": " one "}, {"text": "two"}]) == "Doc 1 (Title: A): one\nDoc 2: two"
    search_r1_item = {"document": {"id": "7", "contents": '"Eiffel Tower"\nA tower in Paris.'}, "score": 3.2}
    assert format_documents([search_r1_item]) == "Doc 1 (Title: Eiffel Tower): A tower in Paris."
    assert format_documents([]) == "No documents matched the query."
    with pytest.raises(ValueError, match="text"):
        format_documents([{"title": "no text"}])


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"topk": 0}, "topk"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"backoff_base_s": -1}, "backoff_base_s"),
        ({"search_url": "localhost:8000"}, "search_url"),
    ],
)
def test_constructor_validates_settings(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SearchToolGroup(**kwargs)


def test_every_search_client_shares_one_ssl_context(monkeypatch):
    """Building httpx's SSL context costs ~20 ms of CPU: it is built once, not once per env instance."""
    import httpx

    from skyrl_gym.tools import search

    search.shared_ssl_context.cache_clear()
    built = []
    create = httpx.create_ssl_context
    monkeypatch.setattr(httpx, "create_ssl_context", lambda *a, **k: built.append(1) or create(*a, **k))
    groups = [SearchToolGroup(search_url="http://127.0.0.1:9") for _ in range(3)]
    assert len(built) == 1 and isinstance(search.shared_ssl_context(), ssl.SSLContext)
    for group in groups:
        group._client.close()
