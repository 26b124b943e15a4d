"""The `remote` engine against a real OpenAI-compatible server on 127.0.0.1: our own server (`create_app` with weight
updates, an hf engine behind it, served by uvicorn in a thread). Token ids and logprobs come back as the engine behind
the server produced them, a chunked weight sync reaches the server and its checksums match, the engine sends the keys
the server checks, and a server that cannot take weights, refuses the credentials, or does not answer, is refused with
the reason."""

import asyncio
from dataclasses import replace

import pytest
import torch

from skyrl_train.inference.client import InferenceEngineClient
from skyrl_train.inference.engine_builders import EngineSettings, remote_preflight
from skyrl_train.inference.hf_decode import DecodeBatch
from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.remote_engine import (
    RemoteAuth,
    RemoteInferenceEngine,
    RemoteServerError,
    default_weights_root,
    detect_server,
    private_folder,
)
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.serving import create_app
from skyrl_train.serving.access import ServingAccess
from skyrl_train.serving.background import BackgroundServer
from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.workers.distributed import free_port

LOGPROB_TOLERANCE = 1e-5  # fp32, the same engine behind HTTP: only JSON float round-trips differ
API_KEY, TOKEN = "sk-api", "sk-weights"


def _serve(tokenizer, weight_updates=True, access=None, in_flight=False):
    engine = HFInferenceEngine(
        build_tiny_model(TinyModelSpec(size=2), seed=0), tokenizer, in_flight_weight_updates=in_flight
    )
    app = create_app(
        InferenceEngineClient([engine]), tokenizer, "skyrl/tiny", weight_updates=weight_updates, access=access
    )
    return engine, BackgroundServer(app, "127.0.0.1", free_port()).start()


@pytest.fixture(scope="module")
def served(tokenizer, tmp_path_factory):
    """A server taking weight updates with a token and no API key, from any folder under pytest's temp root."""
    root = str(tmp_path_factory.getbasetemp())
    engine, server = _serve(tokenizer, access=ServingAccess(weight_update_token=TOKEN, weight_update_root=root))
    yield engine, f"http://127.0.0.1:{server.port}"
    server.stop()


@pytest.fixture(scope="module")
def keyed(tokenizer):
    """A server wanting API_KEY on every route and TOKEN on the weight routes, loading from the default root."""
    engine, server = _serve(tokenizer, access=ServingAccess(api_key=API_KEY, weight_update_token=TOKEN))
    yield engine, f"http://127.0.0.1:{server.port}"
    server.stop()


def _generate(engine, prompts, **params):
    request = InferenceEngineInput(prompt_token_ids=prompts, sampling_params=SamplingParams(**params))
    return asyncio.run(engine.generate(request))


def test_tokens_and_logprobs_come_back_as_the_served_engine_made_them(served, tokenizer):
    local, url = served
    expected = {
        "kind": "skyrl",
        "model": "skyrl/tiny",
        "max_model_len": local.max_model_len,
        "in_flight_weight_updates": False,
    }
    assert detect_server(url, auth=RemoteAuth(weight_update_token=TOKEN)) == expected
    remote = RemoteInferenceEngine(url, tokenizer, weight_update_token=TOKEN)
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
    remote = RemoteInferenceEngine(url, tokenizer, weights_dir=str(tmp_path), weight_update_token=TOKEN)
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


def test_an_in_flight_update_through_the_server_lands_between_two_tokens(
    served, tokenizer, tmp_path, monkeypatch, hold_third_step, forward_logprobs
):
    """skyrl serve with in-flight updates: a folder posted while a completion decodes lands between two of its
    tokens; the choice reports each token's version and every logprob matches a fresh forward of that version."""
    access = ServingAccess(weight_update_token=TOKEN, weight_update_root=str(tmp_path))
    local, server = _serve(tokenizer, access=access, in_flight=True)
    url = f"http://127.0.0.1:{server.port}"
    with pytest.raises(RemoteServerError, match="cannot take weight updates between two tokens"):
        RemoteInferenceEngine(served[1], tokenizer, weight_update_token=TOKEN, in_flight_weight_updates=True)
    remote = RemoteInferenceEngine(
        url, tokenizer, weights_dir=str(tmp_path / "w"), weight_update_token=TOKEN, in_flight_weight_updates=True
    )
    old, new = build_tiny_model(TinyModelSpec(size=2), seed=0), build_tiny_model(TinyModelSpec(size=2), seed=7)
    # the server's model thread holds the third step until the update waits behind it
    counted, steps = hold_third_step(DecodeBatch.step, lambda: local._weights_waiting)
    monkeypatch.setattr(DecodeBatch, "step", counted)
    prompt = [list(tokenizer("12+34=")["input_ids"])]
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=3)  # this seed's sample runs all 12 tokens

    async def scenario():
        request = InferenceEngineInput(prompt_token_ids=prompt, sampling_params=params)
        running = asyncio.create_task(remote.generate(request))
        while len(steps) < 2:
            await asyncio.sleep(0.001)
        await remote.pause()  # returns at once: the running completion takes the update between two tokens
        assert not running.done()
        await remote.update_weights(list(new.state_dict().items()), version=1)
        await remote.resume()
        return await running

    try:
        out = asyncio.run(scenario())
    finally:
        server.stop()
    ids, logprobs, versions = out.response_ids[0], out.response_logprobs[0], out.response_token_versions[0]
    assert versions == [0] * 3 + [1] * 9 and out.weight_version == 0
    for version, model in ((0, old), (1, new)):
        expected = forward_logprobs(model, prompt[0], ids, 1.0)
        for position, token_version in enumerate(versions):
            if token_version == version:
                assert logprobs[position] == pytest.approx(float(expected[position]), abs=1e-4)
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
    remote = RemoteInferenceEngine(url, tokenizer, weights_dir=str(tmp_path), max_retries=1, weight_update_token=TOKEN)
    with pytest.raises(RemoteServerError, match="refused the request.*the model has no parameter 'nope'"):
        asyncio.run(remote.update_weights([("nope", torch.zeros(2))], version=1))
    with pytest.raises(RemoteServerError, match="refused the request.*not a folder holding"):
        asyncio.run(remote._post("/skyrl/update_weights_from_disk", {"path": str(tmp_path / "missing"), "version": 2}))
    remote.base_url = f"http://127.0.0.1:{free_port()}"  # the server went away: retried, then named
    with pytest.raises(RemoteServerError, match="failed after 2 attempts: ConnectError"):
        _generate(remote, [[5, 6, 7]], max_tokens=2)


def _sync_and_check(remote, local, version):
    """A one-chunk sync of a new model through `remote`: served as `version`, with the new checksums."""
    new = build_tiny_model(TinyModelSpec(size=2), seed=version)
    asyncio.run(remote.update_weights(list(new.state_dict().items()), version=version))
    assert local.weight_version == version
    checksums = asyncio.run(remote.weights_checksum(["model.norm.weight"]))
    assert checksums["model.norm.weight"] == pytest.approx(tensor_checksum(new.model.norm.weight))


def test_the_engine_sends_the_api_key_and_the_weight_token(keyed, tokenizer):
    """The server checks both keys; the engine writes its weights under the default root, the only folder the server
    loads from by default."""
    local, url = keyed
    remote = RemoteInferenceEngine(url, tokenizer, api_key=API_KEY, weight_update_token=TOKEN)
    assert remote.weights_dir.parent == default_weights_root()
    assert len(_generate(remote, [[5, 6, 7]], max_tokens=3, temperature=0.0).response_ids[0]) >= 1
    _sync_and_check(remote, local, version=local.weight_version + 1)
    asyncio.run(remote.teardown())
    assert not remote.weights_dir.exists()


def test_missing_or_wrong_keys_are_named_at_start_up(keyed, tokenizer):
    _, url = keyed
    with pytest.raises(RemoteServerError, match="/v1/models answered 401.*engine_init_kwargs.api_key"):
        RemoteInferenceEngine(url, tokenizer)
    with pytest.raises(RemoteServerError, match="/skyrl/info answered 401.*engine_init_kwargs.weight_update_token"):
        RemoteInferenceEngine(url, tokenizer, api_key=API_KEY, weight_update_token="sk-wrong")
    settings = EngineSettings(model_path="unused", backend="remote", remote_urls=(url,))
    with pytest.raises(RemoteServerError, match="answered 401"):
        remote_preflight(settings)  # the driver's check before any actor starts
    remote_preflight(replace(settings, engine_kwargs={"api_key": API_KEY, "weight_update_token": TOKEN}))


def test_headers_and_the_environment_carry_keys_too(tokenizer, monkeypatch):
    """`headers` go with every request (here the bearer key itself, as a gateway might want it); keys not given come
    from SKYRL_API_KEY / SKYRL_WEIGHT_UPDATE_TOKEN."""
    local, server = _serve(tokenizer, access=ServingAccess(api_key=API_KEY))  # the API key opens the weight routes too
    url = f"http://127.0.0.1:{server.port}"
    try:
        by_header = RemoteInferenceEngine(url, tokenizer, headers={"Authorization": f"Bearer {API_KEY}"})
        _sync_and_check(by_header, local, version=1)
        asyncio.run(by_header.teardown())
        monkeypatch.setenv("SKYRL_API_KEY", API_KEY)
        from_env = RemoteInferenceEngine(url, tokenizer)
        _sync_and_check(from_env, local, version=2)
        asyncio.run(from_env.teardown())
    finally:
        server.stop()


def test_the_weights_folder_must_be_private(tmp_path):
    """Synced weights go where no other user can swap them before the server loads them."""
    folder = private_folder(tmp_path / "weights")
    assert folder.stat().st_mode & 0o777 == 0o700
    folder.chmod(0o777)
    with pytest.raises(ValueError, match="writable by no one else"):
        private_folder(folder)
    (tmp_path / "link").symlink_to(folder)
    with pytest.raises(ValueError, match="must be a folder, not a link"):
        private_folder(tmp_path / "link")
