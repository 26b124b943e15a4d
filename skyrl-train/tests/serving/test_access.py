"""Access rules of the OpenAI-compatible server, on uvicorn on 127.0.0.1 (headers and chunked bodies travel as a
client sends them): the API key as the official `openai` client sends it, the body cap counted as the body streams
in, and the docs pages off unless asked for."""

from collections.abc import Iterator

import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.serving import create_app
from skyrl_train.serving.access import ServingAccess, endpoint_access
from skyrl_train.serving.background import BackgroundServer
from skyrl_train.workers.distributed import free_port

MODEL = "skyrl/tiny"
KEY = "sk-test-key"
CAP_MB = 0.0625  # 64 KiB
MESSAGES = [{"role": "user", "content": "1+2="}]


def _client():
    tokenizer = build_char_tokenizer()
    engine = HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=0), tokenizer)
    return InferenceEngineClient([engine]), tokenizer


@pytest.fixture(scope="module")
def keyed() -> Iterator[str]:
    """A server wanting KEY and capping bodies at CAP_MB; yields its base URL (without /v1)."""
    client, tokenizer = _client()
    app = create_app(client, tokenizer, MODEL, access=ServingAccess(api_key=KEY, max_request_mb=CAP_MB))
    server = BackgroundServer(app, "127.0.0.1", free_port()).start()
    yield f"http://127.0.0.1:{server.port}"
    server.stop()


@pytest.mark.integration
def test_the_openai_client_with_the_key_is_served_and_without_it_refused(keyed):
    good = openai.OpenAI(base_url=f"{keyed}/v1", api_key=KEY, max_retries=0)
    assert [model.id for model in good.models.list().data] == [MODEL]
    reply = good.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, seed=0)
    assert reply.choices[0].model_extra["token_ids"]
    wrong = openai.OpenAI(base_url=f"{keyed}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        wrong.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
    assert refused.value.status_code == 401 and refused.value.body["code"] == "invalid_api_key"
    assert "not the API key of this server" in refused.value.body["message"]
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    bare = httpx.post(f"{keyed}/v1/completions", json={"model": MODEL, "prompt": "1", "max_tokens": 1})
    assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"
    assert "send `Authorization: Bearer <key>`" in bare.json()["error"]["message"]
    assert httpx.get(f"{keyed}/health").status_code == 200  # liveness needs no key


def _chunks(total: int, size: int = 8192) -> Iterator[bytes]:
    """A chat request body of about `total` bytes, sent without Content-Length (chunked)."""
    head = b'{"model": "skyrl/tiny", "messages": [{"role": "user", "content": "1+2="}], "user": "'
    yield head
    sent = len(head)
    while sent < total:
        piece = b"A" * min(size, total - sent)
        sent += len(piece)
        yield piece
    yield b'"}'


@pytest.mark.integration
def test_bodies_over_the_cap_get_413_declared_or_chunked(keyed):
    """The review's probe: a 30 MB body (the ignored `user` field) was answered 200. Now any body past the cap is
    refused with 413, whether its size is announced or streamed in chunks, and the server keeps serving."""
    cap = int(CAP_MB * (1 << 20))
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    big = {"model": MODEL, "messages": MESSAGES, "max_tokens": 1, "user": "A" * (2 * cap)}
    declared = httpx.post(f"{keyed}/v1/chat/completions", json=big, headers=headers)
    assert declared.status_code == 413 and f"limit of {cap} bytes" in declared.json()["detail"]
    chunked = httpx.post(f"{keyed}/v1/chat/completions", content=_chunks(4 * cap), headers=headers)
    assert chunked.status_code == 413
    small = {"model": MODEL, "messages": MESSAGES, "max_tokens": 1, "user": "A" * (cap // 2)}
    assert httpx.post(f"{keyed}/v1/chat/completions", json=small, headers=headers).status_code == 200


def test_docs_pages_are_off_unless_asked_for():
    client, tokenizer = _client()
    with TestClient(create_app(client, tokenizer, MODEL)) as http:
        assert [http.get(path).status_code for path in ("/docs", "/redoc", "/openapi.json")] == [404, 404, 404]
    with TestClient(create_app(client, tokenizer, MODEL, access=ServingAccess(docs=True))) as http:
        assert [http.get(path).status_code for path in ("/docs", "/redoc", "/openapi.json")] == [200, 200, 200]


def test_settings_are_checked():
    with pytest.raises(ValueError, match="max_request_mb must be > 0, got 0"):
        ServingAccess(max_request_mb=0)
    with pytest.raises(ValueError, match="api_key is empty"):
        ServingAccess(api_key=" ")


class _Endpoint:
    def __init__(self, api_key_env=None, max_request_mb=16.0):
        self.api_key_env, self.max_request_mb = api_key_env, max_request_mb


def test_a_runs_endpoint_reads_its_key_from_the_named_variable():
    access = endpoint_access(_Endpoint("MY_KEY", 2.0), environ={"MY_KEY": "k1"})
    assert (access.api_key, access.max_request_mb) == ("k1", 2.0)
    assert endpoint_access(_Endpoint(), environ={"SKYRL_API_KEY": "ignored"}).api_key is None
    with pytest.raises(ValueError, match="api_key_env='MY_KEY', but that environment variable is unset or empty"):
        endpoint_access(_Endpoint("MY_KEY"), environ={})
    with pytest.raises(ValueError, match="generator.http_endpoint.max_request_mb must be > 0"):
        endpoint_access(_Endpoint(max_request_mb=-1), environ={})
