"""Bad input, other keys, resubmissions and kill -9: the server answers with a 4xx or a user error naming the
problem, keeps every key's runs private, deduplicates, and never loses a finished result."""

from __future__ import annotations

import json
import time

import httpx
import pytest
import tinker
from tinker import types

from skyrl_tx.cli import DEFAULT_BASE_MODEL as BASE_MODEL
from skyrl_tx.local_server import LocalServer

pytestmark = [pytest.mark.integration]


def post(server, path: str, body, key: str = "tml-raw", **kwargs) -> httpx.Response:
    """A raw request, as the client would send it."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"X-API-Key": key, "Content-Type": "application/json", **kwargs.pop("headers", {})}
    return httpx.post(f"{server.url}/api/v1/{path}", content=content, headers=headers, timeout=60, **kwargs)


def wait_result(server, request_id: str, key: str = "tml-raw") -> dict:
    """Poll retrieve_future until the request is no longer pending; returns the JSON result."""
    deadline = time.time() + 120
    while time.time() < deadline:
        reply = post(server, "retrieve_future", {"request_id": request_id}, key)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        if body.get("type") != "try_again":
            return body
    raise TimeoutError(request_id)


def new_model(server, key: str = "tml-raw") -> str:
    session = post(server, "create_session", {"tags": []}, key).json()["session_id"]
    reply = post(
        server,
        "create_model",
        {"session_id": session, "model_seq_id": 0, "base_model": BASE_MODEL, "lora_config": {"rank": 2}},
        key,
    ).json()
    assert wait_result(server, reply["request_id"], key) == {"model_id": reply["model_id"]}
    return reply["model_id"]


def datum(tokens: list[int], **inputs) -> types.Datum:
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)


def test_bad_input_gets_a_4xx_or_a_user_error_naming_the_field_and_the_server_lives_on(tx_server, make_client):
    client = make_client(tx_server.url, "tml-bad-input")
    good = datum([5, 6, 7, 8], target_tokens=[6, 7, 8], weights=[1.0, 1.0, 1.0])

    training = client.create_lora_training_client(base_model=BASE_MODEL, rank=2).result()
    with pytest.raises(tinker.BadRequestError, match="'dro' is not supported"):
        training.forward_backward([good], "dro").result()
    training = client.create_lora_training_client(base_model=BASE_MODEL, rank=2).result()  # the last one is poisoned
    with pytest.raises(tinker.BadRequestError, match=r"\['clip'\] do not apply"):
        training.forward_backward([good], "ppo", {"clip": 0.1}).result()
    training = client.create_lora_training_client(base_model=BASE_MODEL, rank=2).result()
    outside = datum([5, 6, 7, 10**6], target_tokens=[6, 7, 10**6], weights=[1.0, 1.0, 1.0])
    with pytest.raises(tinker.RequestFailedError, match=r"target_tokens: ids must be in \[0, "):
        training.forward_backward([outside], "cross_entropy").result()
    training = client.create_lora_training_client(base_model=BASE_MODEL, rank=2).result()
    short = datum([5, 6, 7, 8], target_tokens=[6, 7, 8], weights=[1.0])
    with pytest.raises(tinker.RequestFailedError, match=r"data\[0\].loss_fn_inputs.weights: 1 values for 3"):
        training.forward_backward([short], "cross_entropy").result()
    with pytest.raises(tinker.BadRequestError, match="base_model 'nope/model' is not served here"):
        client.create_lora_training_client(base_model="nope/model", rank=2).result()

    model_id = new_model(tx_server)
    garbage = post(
        tx_server,
        "forward_backward",
        b"\xff\xfe not protobuf",
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert garbage.status_code == 400 and "not a ForwardBackwardRequest protobuf" in garbage.json()["detail"]
    assert post(tx_server, "optim_step", b"{not json").status_code == 400
    missing = post(tx_server, "optim_step", {"model_id": model_id, "seq_id": 1})
    assert missing.status_code == 400 and "adam_params" in missing.json()["detail"]
    assert post(tx_server, "get_info", {"model_id": "nobody:train:0"}).status_code == 404
    bad_sample = post(
        tx_server,
        "asample",
        {"base_model": BASE_MODEL, "prompt": {"chunks": [{"type": "encoded_text", "tokens": [-3]}]}, "num_samples": 1},
    )
    assert bad_sample.status_code == 400 and "prompt: token ids must be in [0, " in bad_sample.json()["detail"]
    assert httpx.get(f"{tx_server.url}/healthz").json()["status"] == "ok"


def test_resubmitting_a_seq_id_returns_the_same_request_and_a_different_payload_conflicts(tx_server):
    model_id = new_model(tx_server)
    step = {"model_id": model_id, "seq_id": 1, "type": "optim_step", "adam_params": {"learning_rate": 1e-3}}
    first = post(tx_server, "optim_step", step).json()["request_id"]
    assert post(tx_server, "optim_step", step).json()["request_id"] == first
    conflict = post(tx_server, "optim_step", {**step, "adam_params": {"learning_rate": 1.0}})
    assert conflict.status_code == 409 and "different payload" in conflict.json()["detail"]
    assert "metrics" in wait_result(tx_server, first)


def test_a_key_sees_only_what_it_created(tx_server, make_client):
    owner = make_client(tx_server.url, "tml-owner")
    training = owner.create_lora_training_client(base_model=BASE_MODEL, rank=2).result()
    checkpoint = training.save_weights_for_sampler("private").result().path
    other_rest = tinker.RestClient(base_url=tx_server.url, api_key="tml-intruder")
    other = make_client(tx_server.url, "tml-intruder")

    with pytest.raises(tinker.NotFoundError):
        other.create_sampling_client(model_path=checkpoint).result()
    with pytest.raises(tinker.NotFoundError):
        other_rest.delete_checkpoint_from_tinker_path(checkpoint).result()
    with pytest.raises(tinker.NotFoundError):
        other_rest.get_training_run(training.model_id).result()
    runs = other_rest.list_training_runs().result().training_runs
    assert training.model_id not in {run.training_run_id for run in runs}
    assert post(tx_server, "get_info", {"model_id": training.model_id}, key="tml-intruder").status_code == 404
    # the owner still has it
    mine = tinker.RestClient(base_url=tx_server.url, api_key="tml-owner").list_checkpoints(training.model_id)
    assert [c.tinker_path for c in mine.result().checkpoints] == [checkpoint]


def _chunks(total: int, size: int = 4096):
    """`total` bytes of a JSON object from a generator: httpx sends it chunked, with no Content-Length header."""
    body = json.dumps({"tags": [], "user_metadata": {"x": "A" * (total - 40)}}).encode()
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_keys_are_checked_bodies_are_capped_as_they_stream_and_the_state_is_private(tmp_path):
    server = LocalServer(tmp_path, ["--max-request-mb", "0.01", "--api-key", "tml-flag"], api_keys=("tml-allowed",))
    tmp_path.chmod(0o755)
    server.start()
    try:
        assert post(server, "create_session", {}, key="tml-allowed").status_code == 200
        assert post(server, "create_session", {}, key="tml-flag").status_code == 200  # --api-key adds to the env keys
        refused = post(server, "create_session", {}, key="tml-someone-else")
        assert refused.status_code == 401 and "not one of this server's keys" in refused.json()["detail"]
        assert post(server, "create_session", {}, key="").status_code == 401
        big = post(server, "create_session", {"tags": ["x" * 20_000]}, key="tml-allowed")
        assert big.status_code == 413 and "exceeds the server's limit" in big.json()["detail"]
        database = tmp_path / "skyrl_tx.db"
        size_before = sum(path.stat().st_size for path in tmp_path.glob("skyrl_tx.db*"))
        headers = {"X-API-Key": "tml-allowed", "Content-Type": "application/json"}
        url = f"{server.url}/api/v1/create_session"
        chunked = httpx.post(url, content=_chunks(5 << 20), headers=headers, timeout=60)  # the review's probe: 200
        assert chunked.status_code == 413 and "limit of 10485 bytes" in chunked.json()["detail"]
        assert sum(path.stat().st_size for path in tmp_path.glob("skyrl_tx.db*")) < size_before + (1 << 20)
        assert httpx.post(url, content=_chunks(8000), headers=headers, timeout=60).status_code == 200
        # FastAPI's self-description is off; /healthz says only that the server is up
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert httpx.get(f"{server.url}{path}").status_code == 404
        assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
        # the service's files are its user's alone
        assert tmp_path.stat().st_mode & 0o777 == 0o700 and database.stat().st_mode & 0o777 == 0o600
    finally:
        server.stop()


def test_kill_9_keeps_finished_results_fails_in_flight_ones_and_the_client_resumes_from_its_state(
    tmp_path, database_url
):
    server = LocalServer(tmp_path, ["--database-url", database_url], api_keys=("tml-crash",))
    server.start()
    try:
        client = tinker.ServiceClient(base_url=server.url, api_key="tml-crash")
        training = client.create_lora_training_client(base_model=BASE_MODEL, rank=4, seed=0).result()
        data = [datum([5, 6, 7, 8, 9], target_tokens=[6, 7, 8, 9], weights=[1.0] * 4)]
        for _ in range(2):
            training.forward_backward(data, "cross_entropy").result()
            training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        state = training.save_state("before-crash").result().path
        loss_before = training.forward(data, "cross_entropy").result().metrics["loss:sum"]

        finished = new_model(server, "tml-crash")  # a completed create_model future, read back after the crash
        session = post(server, "create_session", {}, "tml-crash").json()["session_id"]
        finished_request = post(
            server,
            "create_model",
            {"session_id": session, "model_seq_id": 0, "base_model": BASE_MODEL, "lora_config": {"rank": 2}},
            "tml-crash",
        ).json()["request_id"]
        wait_result(server, finished_request, "tml-crash")
        prompt = {"chunks": [{"type": "encoded_text", "tokens": [5, 6, 7]}]}
        params = {"max_tokens": 200, "temperature": 1.0, "stop": []}
        in_flight = [
            post(
                server,
                "asample",
                {"base_model": BASE_MODEL, "prompt": prompt, "num_samples": 8, "sampling_params": params},
                "tml-crash",
            ).json()["request_id"]
            for _ in range(12)
        ]
        server.restart()

        again = wait_result(server, finished_request, "tml-crash")
        assert again["model_id"].endswith(":train:0") and finished
        outcomes = [post(server, "retrieve_future", {"request_id": rid}, "tml-crash") for rid in in_flight]
        for reply in outcomes:  # every request resolves: a result (proto) or a failure naming the restart
            assert reply.status_code == 200
            if reply.headers["content-type"].startswith("application/json"):
                assert reply.json()["category"] == "server" and "server stopped" in reply.json()["error"]
        with pytest.raises(tinker.BadRequestError, match="weights are gone; continue from its last checkpoint"):
            training.forward(data, "cross_entropy").result()
        resumed = client.create_training_client_from_state_with_optimizer(state).result()
        assert resumed.forward(data, "cross_entropy").result().metrics["loss:sum"] == pytest.approx(loss_before, 1e-5)
        resumed.forward_backward(data, "cross_entropy").result()
        resumed.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        assert resumed.forward(data, "cross_entropy").result().metrics["loss:sum"] < loss_before
        client.close("success")
    finally:
        server.stop()


def test_ended_sessions_unload_their_adapters_closed_or_silent_on_a_dev_mode_server(tmp_path):
    server = LocalServer(tmp_path, ["--session-timeout-s", "2"], dev_mode=True)  # no keys configured
    server.start()
    key = server.api_key  # the one the server generated, printed and kept in its folder
    try:
        assert key.startswith("tml-dev-") and f"the one accepted key is {key}" in server.log_path.read_text()
        assert post(server, "create_session", {}, "tml-local").status_code == 401  # no shared default key
        headers = {"X-API-Key": key}
        adapters = lambda: httpx.get(f"{server.url}/healthz", headers=headers).json()["adapters"]  # noqa: E731
        client = tinker.ServiceClient(base_url=server.url, api_key=key)
        training = client.create_lora_training_client(base_model=BASE_MODEL, rank=2).result()
        state = training.save_state("kept").result().path
        assert adapters() == 1
        client.close("success")  # POST sessions/{id}/finish
        deadline = time.time() + 30
        while adapters() and time.time() < deadline:
            time.sleep(0.2)
        assert adapters() == 0
        closed = post(server, "optim_step", {"model_id": training.model_id, "seq_id": 9, "adam_params": {}}, key)
        assert closed.status_code == 400 and "was unloaded when its session finished" in closed.json()["detail"]

        silent = new_model(server, key)  # raw HTTP: no heartbeats follow
        assert adapters() == 1
        deadline = time.time() + 30
        while adapters() and time.time() < deadline:
            time.sleep(0.2)
        assert adapters() == 0
        info = post(server, "optim_step", {"model_id": silent, "seq_id": 1, "adam_params": {}}, key)
        assert info.status_code == 400 and "session expired" in info.json()["detail"]
        assert post(server, "session_heartbeat", {"session_id": silent.split(":")[0]}, key).status_code == 410
        # the checkpoint outlives the session
        again = tinker.ServiceClient(base_url=server.url, api_key=key)
        assert again.create_training_client_from_state(state).result().model_id
        again.close("success")
    finally:
        server.stop()
