"""The app in process over a real `Service` (tiny model, SQLite): what hostile or careless requests get back (400
naming the budget, 429 naming the quota), futures that never wedge, reruns after a restart, polls that leave
nothing behind, and routes that say no more than they must."""

from __future__ import annotations

import hashlib
import os
import re
import time

import pytest
from tinker.proto.response_conv import deserialize_sample_response

from skyrl_tx.app import ApiKeys
from skyrl_tx.db import FutureRow
from skyrl_tx.limits import Limits

TINY = "org/tiny"
"""The name `make_app` (conftest.py) serves the tiny model under."""
PROMPT = {"chunks": [{"type": "encoded_text", "tokens": [5, 6, 7]}]}


def post(client, path: str, body: dict, key: str = "tml-a"):
    return client.post(f"/api/v1/{path}", json=body, headers={"X-API-Key": key})


def result(client, request_id: str, key: str = "tml-a"):
    """Poll until the request is no longer pending; returns the final response."""
    deadline = time.time() + 60
    while time.time() < deadline:
        reply = post(client, "retrieve_future", {"request_id": request_id}, key)
        if (
            reply.headers["content-type"].startswith("application/x-protobuf")
            or reply.json().get("type") != "try_again"
        ):
            return reply
    raise TimeoutError(request_id)


def session(client, key: str = "tml-a") -> str:
    reply = post(client, "create_session", {"tags": ["t"], "user_metadata": {"a": 1}}, key)
    assert reply.status_code == 200, reply.text
    return reply.json()["session_id"]


def model(client, key: str = "tml-a", rank: int = 2, seq: int = 0, session_id: str | None = None) -> str:
    body = {"session_id": session_id or session(client, key), "model_seq_id": seq, "base_model": TINY}
    reply = post(client, "create_model", {**body, "lora_config": {"rank": rank}}, key)
    assert reply.status_code == 200, reply.text
    assert result(client, reply.json()["request_id"], key).json() == {"model_id": reply.json()["model_id"]}
    return reply.json()["model_id"]


def sample_body(**changes) -> dict:
    body = {"base_model": TINY, "prompt": PROMPT, "num_samples": 1, "sampling_params": {"max_tokens": 3, "seed": 1}}
    params = changes.pop("sampling_params", {})
    return {**body, **changes, "sampling_params": {**body["sampling_params"], **params}}


def test_docs_are_off_unless_asked_and_healthz_tells_a_stranger_only_that_it_is_up(make_app):
    client, _ = make_app()
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert client.get(path).status_code == 404
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/healthz", headers={"X-API-Key": "tml-wrong"}).json() == {"status": "ok"}
    model(client)
    mine = client.get("/healthz", headers={"X-API-Key": "tml-a"}).json()
    assert (mine["adapters"], mine["queued"]) == (1, 0)
    assert client.get("/healthz", headers={"X-API-Key": "tml-b"}).json()["adapters"] == 0  # only its own
    with_docs, _ = make_app(folder=None, docs=True)
    assert with_docs.get("/openapi.json").status_code == 200


def test_keys_are_matched_by_digest_and_owner_ids_stay_what_they_were():
    keys = ApiKeys.of(["tml-a", "tml-b"])
    assert keys.owner("tml-a") == hashlib.sha256(b"tml-a").hexdigest()[:16]  # existing databases keep their owners
    for refused in ("tml-c", "tml-", "tml-a "):
        with pytest.raises(PermissionError, match="not one of this server's keys"):
            keys.owner(refused)
    with pytest.raises(PermissionError, match="missing X-API-Key"):
        keys.owner(None)
    with pytest.raises(ValueError, match="at least one key"):
        ApiKeys.of([])


def test_a_body_that_fails_validation_creates_no_future_and_its_retry_gets_the_same_answer(make_app):
    client, service = make_app()
    body = {"session_id": session(client), "model_seq_id": 0, "base_model": TINY, "user_metadata": [1]}
    for _ in range(2):  # the client retries; the review saw 500, then a future pending forever
        reply = post(client, "create_model", body)
        assert reply.status_code == 400 and "user_metadata must be an object" in reply.json()["detail"]
    with service.db.session() as s:
        assert s.query(FutureRow).count() == 0


def test_a_request_the_server_failed_runs_again_when_resubmitted_after_a_restart(make_app, tmp_path):
    client, service = make_app()
    sampling = post(client, "create_sampling_session", {"session_id": session(client), "base_model": TINY})
    body = sample_body(sampling_session_id=sampling.json()["sampling_session_id"], seq_id=1)
    body.pop("base_model")
    service.compute.stop()  # the request stays queued, as when the process is killed mid-flight
    first = post(client, "asample", body).json()["request_id"]

    again, _ = make_app()  # a new server process on the same database and folder
    assert result(again, first).json()["category"] == "server"  # failed at start-up: "resubmit it"
    resubmitted = post(again, "asample", body)
    assert resubmitted.json()["request_id"] == first
    decoded = deserialize_sample_response(result(again, first).content)
    assert len(decoded.sequences) == 1 and len(decoded.sequences[0].tokens) == 3


def test_polls_of_unknown_foreign_and_finished_requests_leave_no_event_behind(make_app):
    client, service = make_app()
    model(client)  # one finished request (id 1) of tml-a
    for request_id in range(2, 52):
        assert post(client, "retrieve_future", {"request_id": str(request_id)}).status_code == 404
    assert post(client, "retrieve_future", {"request_id": "1"}, key="tml-b").status_code == 404
    assert post(client, "retrieve_future", {"request_id": "1"}).status_code == 200
    assert len(service.notifier._events) == 0


def test_sampled_top_k_logprobs_come_back_with_k_columns(make_app):
    client, _ = make_app()
    reply = post(client, "asample", sample_body(num_samples=2, topk_sample_logprobs=3))
    decoded = deserialize_sample_response(result(client, reply.json()["request_id"]).content)
    for sequence in decoded.sequences:
        assert sequence.topk_logprobs is not None and len(sequence.topk_logprobs) == len(sequence.tokens)
        assert all(len(row) == 3 for row in sequence.topk_logprobs)


SMALL = Limits(max_datums=4, max_batch_tokens=32, max_sample_tokens=100, max_stop=2, max_stop_chars=8)


@pytest.mark.parametrize(
    "path,body,message",
    [
        ("asample", sample_body(topk_sample_logprobs=10**6), r"topk_sample_logprobs must be in \[0, 20\]"),
        ("asample", sample_body(topk_prompt_logprobs=21, prompt_logprobs=True), r"topk_prompt_logprobs must be in"),
        ("asample", sample_body(sampling_params={"seed": "x"}), "sampling_params.seed must be an integer"),
        ("asample", sample_body(sampling_params={"seed": 2**63}), r"seed must be in \[0, 2\^63\)"),
        ("asample", sample_body(sampling_params={"seed": -1}), r"seed must be in \[0, 2\^63\)"),
        ("asample", sample_body(prompt={"chunks": [{"tokens": [5, 10**6]}]}), r"prompt: token ids must be in \[0, "),
        ("asample", sample_body(prompt={"chunks": [{"tokens": [5, 6.5]}]}), "tokens must be a list of integers"),
        ("asample", sample_body(sampling_params={"stop": [10**6]}), r"stop\[0\] must be a string or a token id"),
        ("asample", sample_body(sampling_params={"stop": ["a", "b", "c"]}), r"3 entries; .* at most 2 \(--max-stop\)"),
        ("asample", sample_body(sampling_params={"stop": ["x" * 9]}), r"9 characters; .* \(--max-stop-chars\)"),
        ("asample", sample_body(sampling_params={"temperature": "hot"}), "temperature must be a finite number"),
        ("asample", sample_body(sampling_params={"max_tokens": 2.5}), "max_tokens must be an integer"),
        ("asample", sample_body(sampling_params={"top_p": 0}), r"top_p must be in \(0, 1\]"),
        ("asample", sample_body(num_samples=40), r"40 x \(3 \+ 3\) = 240 tokens; .* \(--max-sample-tokens\)"),
        ("create_session", {"user_metadata": {"x": "A" * 20000}}, r"user_metadata is \d+ bytes .* at most 16384"),
        ("create_session", {"tags": [{"nested": 1}]}, "tags must be a list of strings"),
    ],
)
def test_over_budget_or_malformed_requests_get_400_naming_the_field_and_the_limit(make_app, path, body, message):
    client, service = make_app(SMALL)
    reply = post(client, path, body)
    assert reply.status_code == 400, reply.text
    assert re.search(message, reply.json()["detail"]), reply.json()
    with service.db.session() as s:
        assert s.query(FutureRow).count() == 0  # refused before anything was queued


def test_create_model_refuses_a_rank_now_instead_of_failing_its_future_later(make_app):
    client, _ = make_app(Limits(max_lora_rank=64))
    body = {"session_id": session(client), "model_seq_id": 0, "base_model": TINY}
    for rank, expected in ((100000, r"rank must be in \[1, 64\] \(--max-lora-rank\), got 100000"), ("8", "integer")):
        reply = post(client, "create_model", {**body, "lora_config": {"rank": rank}})
        assert reply.status_code == 400 and re.search(expected, reply.json()["detail"]), reply.text


def test_forward_backward_budgets_are_checked_before_the_request_is_queued(make_app):
    from tinker import types
    from tinker.proto.request_conv import forward_backward_request_to_proto
    from tinker.types import ForwardBackwardInput

    client, _ = make_app(SMALL)
    model_id = model(client)

    def call(data):
        request = types.ForwardBackwardRequest(
            forward_backward_input=ForwardBackwardInput(data=data, loss_fn="cross_entropy"), model_id=model_id, seq_id=1
        )
        raw = forward_backward_request_to_proto(request).SerializeToString()
        headers = {"X-API-Key": "tml-a", "Content-Type": "application/x-protobuf"}
        return client.post("/api/v1/forward_backward", content=raw, headers=headers)

    def datum(length):
        tokens = list(range(3, 3 + length))
        return types.Datum(
            model_input=types.ModelInput.from_ints(tokens),
            loss_fn_inputs={"target_tokens": tokens, "weights": [1.0] * length},
        )

    many = call([datum(1)] * 5)
    assert many.status_code == 400 and "5 datums; this server takes at most 4 per request (--max-datums)" in many.text
    padded = call([datum(1), datum(1), datum(20)])  # 22 real tokens, but the forward pads to 3 x 20
    assert padded.status_code == 400 and "3 datums x 20 tokens (the longest) = 60 padded tokens" in padded.text
    assert "(--max-batch-tokens)" in padded.text
    assert call([datum(8), datum(8)]).status_code == 200  # 16 padded tokens fit


def test_client_config_tells_the_official_client_to_chunk_within_the_budgets(make_app):
    client, _ = make_app(Limits(max_datums=64, max_batch_tokens=4096, max_queued_per_key=32))
    config = post(client, "client/config", {}).json()
    assert config["fwdbwd_max_chunk_len"] == 64
    assert config["fwdbwd_max_chunk_bytes_count"] == 16 * 4096
    assert config["sample_max_concurrent_requests"] == 32


def test_quotas_answer_429_naming_the_quota_and_never_refuse_a_resubmission(make_app):
    limits = Limits(
        max_sessions_per_key=3,
        max_adapters_per_key=2,
        max_lora_rank_per_key=6,
        max_checkpoints_per_key=1,
        max_queued_per_key=3,
    )
    client, service = make_app(limits)
    first = session(client)
    model(client, rank=4, session_id=first)
    body = {"session_id": first, "model_seq_id": 1, "base_model": TINY, "lora_config": {"rank": 4}}
    over_rank = post(client, "create_model", body)
    assert over_rank.status_code == 429 and "total LoRA rank of 4; a rank-4 adapter" in over_rank.text
    assert over_rank.headers["x-should-retry"] == "false"  # waiting does not help: the client must not retry
    second = model(client, rank=2, seq=2, session_id=first)
    too_many = post(client, "create_model", {**body, "model_seq_id": 3, "lora_config": {"rank": 1}})
    assert (
        too_many.status_code == 429 and "2 live adapters" in too_many.text and "--max-adapters-per-key" in too_many.text
    )
    assert post(client, "create_model", {**body, "model_seq_id": 2, "lora_config": {"rank": 2}}).status_code == 200
    assert model(client, key="tml-b")  # another key's quota is its own

    session(client)
    session(client)
    sessions = post(client, "create_session", {})
    assert (
        sessions.status_code == 429
        and "3 active sessions" in sessions.text
        and "--max-sessions-per-key" in sessions.text
    )

    saved = post(client, "save_weights", {"model_id": second, "path": "c1", "seq_id": 1})
    assert result(client, saved.json()["request_id"]).json()["path"].endswith("/weights/c1")
    over = post(client, "save_weights", {"model_id": second, "path": "c2", "seq_id": 2})
    assert over.status_code == 429 and "--max-checkpoints-per-key" in over.text
    overwrite = post(client, "save_weights", {"model_id": second, "path": "c1", "seq_id": 3, "overwrite": True})
    assert result(client, overwrite.json()["request_id"]).json()["path"].endswith("/weights/c1")

    service.compute.stop()  # nothing drains: requests pile up
    queued = [post(client, "asample", sample_body()) for _ in range(limits.max_queued_per_key + 1)]
    assert {reply.status_code for reply in queued[:-1]} == {200}
    assert queued[-1].status_code == 429 and "--max-queued-per-key" in queued[-1].text
    assert queued[-1].headers["retry-after"] == "1"  # this one drains by itself: the client retries


def test_one_keys_malformed_sample_never_fails_another_keys_request(make_app):
    client, _ = make_app()
    alice = post(client, "asample", sample_body(num_samples=4, sampling_params={"max_tokens": 8}))
    bob = post(client, "asample", sample_body(sampling_params={"seed": "x"}), key="tml-b")
    alice_again = post(client, "asample", sample_body())
    assert bob.status_code == 400
    for reply in (alice, alice_again):
        assert result(client, reply.json()["request_id"]).headers["content-type"] == "application/x-protobuf"


def test_an_overwrite_keeps_one_folder_and_one_record_and_a_restart_repairs_an_interrupted_one(make_app, tmp_path):
    client, service = make_app()
    model_id = model(client)
    for seq, extra in ((1, {}), (2, {"overwrite": True})):
        body = {"model_id": model_id, "path": "c1", "seq_id": seq, "user_metadata": {"step": seq}, **extra}
        assert result(client, post(client, "save_weights", body).json()["request_id"]).json()["path"]
    folder = tmp_path / "runs" / model_id / "weights"
    assert [path.name for path in folder.iterdir()] == ["c1"]  # no staging or old folder left
    rows = post(client, "weights_info", {"tinker_path": f"tinker://{model_id}/weights/c1"})
    assert rows.status_code == 200
    listed = client.get(f"/api/v1/training_runs/{model_id}/checkpoints", headers={"X-API-Key": "tml-a"}).json()
    assert [c["user_metadata"] for c in listed["checkpoints"]] == [{"step": "2"}]

    os.replace(folder / "c1", folder / ".c1.old-0000abcd")  # killed between moving the old folder aside and the new in
    service.compute.stop()
    again, _ = make_app()
    assert [path.name for path in folder.iterdir()] == ["c1"]
    assert post(again, "weights_info", {"tinker_path": f"tinker://{model_id}/weights/c1"}).status_code == 200
