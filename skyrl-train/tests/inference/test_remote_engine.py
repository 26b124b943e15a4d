"""The `remote` engine against a real OpenAI-compatible server on 127.0.0.1: our own server (`create_app` with weight
updates, an hf engine behind it, served by uvicorn in a thread). Token ids and logprobs come back as the engine behind
the server produced them, a chunked weight sync reaches the server and its checksums match, and a server that cannot
take weights, or does not answer, is refused with the reason."""

import asyncio

import pytest
import torch

from skyrl_train.inference.client import InferenceEngineClient
from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.remote_engine import RemoteInferenceEngine, RemoteServerError, detect_server
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.serving import create_app
from skyrl_train.serving.background import BackgroundServer
from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.workers.distributed import free_port

LOGPROB_TOLERANCE = 1e-5  # fp32, the same engine behind HTTP: only JSON float round-trips differ


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def _serve(tokenizer, weight_updates=True):
    engine = HFInferenceEngine(build_tiny_model(TinyModelSpec(size=2), seed=0), tokenizer)
    app = create_app(InferenceEngineClient([engine]), tokenizer, "skyrl/tiny", weight_updates=weight_updates)
    return engine, BackgroundServer(app, "127.0.0.1", free_port()).start()


@pytest.fixture(scope="module")
def served(tokenizer):
    engine, server = _serve(tokenizer)
    yield engine, f"http://127.0.0.1:{server.port}"
    server.stop()


def _generate(engine, prompts, **params):
    request = InferenceEngineInput(prompt_token_ids=prompts, sampling_params=SamplingParams(**params))
    return asyncio.run(engine.generate(request))


def test_tokens_and_logprobs_come_back_as_the_served_engine_made_them(served, tokenizer):
    local, url = served
    assert detect_server(url) == {"kind": "skyrl", "model": "skyrl/tiny", "max_model_len": local.max_model_len}
    remote = RemoteInferenceEngine(url, tokenizer)
    prompts = [list(tokenizer(f"{i}+{2 * i}=")["input_ids"]) for i in range(3)]
    got = _generate(remote, prompts, max_tokens=8, temperature=0.0, n=2)
    expected = _generate(local, prompts, max_tokens=8, temperature=0.0, n=2)
    assert got.response_ids == expected.response_ids and got.stop_reasons == expected.stop_reasons
    for mine, theirs in zip(got.response_logprobs, expected.response_logprobs):
        assert torch.allclose(torch.tensor(mine), torch.tensor(theirs), atol=LOGPROB_TOLERANCE)
    seeded = _generate(remote, prompts[:1], max_tokens=8, temperature=1.0, n=2, seed=7)
    assert (
        seeded.response_ids == _generate(remote, prompts[:1], max_tokens=8, temperature=1.0, n=2, seed=7).response_ids
    )
    asyncio.run(remote.teardown())


def test_a_chunked_weight_sync_reaches_the_server_and_verifies(served, tokenizer, tmp_path):
    local, url = served
    remote = RemoteInferenceEngine(url, tokenizer, weights_dir=str(tmp_path))
    new = build_tiny_model(TinyModelSpec(size=2), seed=3)
    state = list(new.state_dict().items())
    asyncio.run(remote.update_weights(state[:5], version=remote.weight_version))  # a non-final chunk: staged only
    assert local.weight_version == 0
    asyncio.run(remote.update_weights(state[5:], version=1))
    assert remote.weight_version == 1 and local.weight_version == 1
    checksums = asyncio.run(remote.weights_checksum())
    for name, tensor in new.named_parameters():
        assert checksums[name] == pytest.approx(tensor_checksum(tensor)), name
    prompt = [list(tokenizer("5+5=")["input_ids"])]
    reference = new.generate(torch.tensor(prompt), max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert _generate(remote, prompt, max_tokens=8, temperature=0.0).response_ids[0] == reference[0, 4:].tolist()
    asyncio.run(remote.teardown())


def test_servers_that_cannot_take_weights_or_do_not_answer_are_refused(tokenizer):
    _, server = _serve(tokenizer, weight_updates=False)
    try:
        with pytest.raises(RemoteServerError, match="has no endpoint to load new weights"):
            detect_server(f"http://127.0.0.1:{server.port}")
    finally:
        server.stop()
    with pytest.raises(RemoteServerError, match="does not answer"):
        detect_server(f"http://127.0.0.1:{free_port()}", timeout_s=2)


def test_bad_weight_folders_and_failed_requests_name_the_problem(served, tokenizer, tmp_path):
    _, url = served
    remote = RemoteInferenceEngine(url, tokenizer, weights_dir=str(tmp_path), max_retries=1)
    with pytest.raises(RemoteServerError, match="refused the request.*the model has no parameter 'nope'"):
        asyncio.run(remote.update_weights([("nope", torch.zeros(2))], version=1))
    with pytest.raises(RemoteServerError, match="refused the request.*not a folder holding"):
        asyncio.run(remote._post("/skyrl/update_weights_from_disk", {"path": str(tmp_path / "missing"), "version": 2}))
    remote.base_url = f"http://127.0.0.1:{free_port()}"  # the server went away: retried, then named
    with pytest.raises(RemoteServerError, match="failed after 2 attempts: ConnectError"):
        _generate(remote, [[5, 6, 7]], max_tokens=2)
