"""The OpenAI-compatible server for real: uvicorn on 127.0.0.1 over an in-process hf engine with a tiny model,
driven by the official `openai` client (sync and async). Seeded requests are checked against a direct engine call
with the same sampling, so the server reports exactly the engine's tokens and logprobs."""

import asyncio
import json
import threading
import time

import openai
import pytest
import torch
import uvicorn
from fastapi.testclient import TestClient

from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.loading import load_causal_lm, load_tokenizer
from skyrl_train.serving import create_app
from skyrl_train.workers.distributed import free_port

MODEL = "skyrl/tiny"
MESSAGES = [{"role": "user", "content": "12+34="}]


def _engine(spread_tiny_model_dir):
    return HFInferenceEngine(
        load_causal_lm(spread_tiny_model_dir, dtype="float32"), load_tokenizer(spread_tiny_model_dir)
    )


@pytest.fixture(scope="module")
def server(spread_tiny_model_dir):
    """The app on a free port in a background thread; yields its base URL."""
    torch.set_num_threads(1)
    app = create_app(
        InferenceEngineClient([_engine(spread_tiny_model_dir)]), load_tokenizer(spread_tiny_model_dir), MODEL
    )
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uv.started, "the server did not start"
    yield f"http://127.0.0.1:{port}/v1"
    uv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server, api_key="unused", max_retries=0)


def _direct(spread_tiny_model_dir, prompt_ids, **sampling):
    """The engine's own answer to the same request (a second engine on the same weights)."""
    request = InferenceEngineInput(prompt_token_ids=[prompt_ids], sampling_params=SamplingParams(**sampling))
    return asyncio.run(_engine(spread_tiny_model_dir).generate(request))


def test_models_lists_the_served_name(client):
    assert [model.id for model in client.models.list().data] == [MODEL]


def test_chat_returns_the_engines_tokens_and_logprobs(client, spread_tiny_model_dir):
    response = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=6, temperature=1.0, n=2, seed=7, logprobs=True, top_logprobs=2
    )
    extra = response.model_extra
    tokenizer = load_tokenizer(spread_tiny_model_dir)
    expected_prompt = list(
        tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)["input_ids"]
    )
    assert extra["prompt_token_ids"] == expected_prompt
    direct = _direct(spread_tiny_model_dir, expected_prompt, max_tokens=6, temperature=1.0, n=2, seed=7, top_logprobs=2)
    assert len(response.choices) == 2
    for index, choice in enumerate(response.choices):
        assert choice.model_extra["token_ids"] == direct.response_ids[index]
        assert choice.message.content == direct.responses[index]
        logprobs = [entry.logprob for entry in choice.logprobs.content]
        assert logprobs == pytest.approx(direct.response_logprobs[index], abs=1e-5)
        assert all(len(entry.top_logprobs) == 2 for entry in choice.logprobs.content)
        assert choice.finish_reason in ("stop", "length")
    assert response.usage.prompt_tokens == len(expected_prompt)
    assert response.usage.completion_tokens == sum(len(ids) for ids in direct.response_ids)


def test_completion_with_text_prompt_logprobs_and_stop(client, spread_tiny_model_dir):
    response = client.completions.create(model=MODEL, prompt="7+8=", max_tokens=8, seed=3, logprobs=2, stop=["\n"])
    choice = response.choices[0]
    prompt_ids = list(load_tokenizer(spread_tiny_model_dir)("7+8=", add_special_tokens=False)["input_ids"])
    assert response.model_extra["prompt_token_ids"] == prompt_ids
    direct = _direct(spread_tiny_model_dir, prompt_ids, max_tokens=8, seed=3, top_logprobs=2, stop=("\n",))
    assert choice.text == direct.responses[0] and "\n" not in choice.text
    assert choice.logprobs.token_logprobs == pytest.approx(direct.response_logprobs[0], abs=1e-5)
    assert len(choice.logprobs.tokens) == len(choice.logprobs.top_logprobs) == len(direct.response_ids[0])
    # token ids in, too: the same prompt as ids gives the same completion
    again = client.completions.create(model=MODEL, prompt=prompt_ids, max_tokens=8, seed=3, stop=["\n"])
    assert again.choices[0].text == choice.text


def test_streaming_sends_the_same_text_token_by_token(client):
    plain = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, seed=11)
    pieces, finish = [], None
    for chunk in client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, seed=11, stream=True):
        delta = chunk.choices[0].delta
        pieces.append(delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces) == plain.choices[0].message.content
    assert len([p for p in pieces if p]) >= 1 and finish == plain.choices[0].finish_reason
    text = "".join(
        chunk.choices[0].text
        for chunk in client.completions.create(model=MODEL, prompt="1+1=", max_tokens=5, seed=2, stream=True)
    )
    assert text == client.completions.create(model=MODEL, prompt="1+1=", max_tokens=5, seed=2).choices[0].text


def test_tools_go_through_the_chat_template(client):
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
    with_tools = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, tools=tools, seed=1)
    without = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, seed=1)
    assert len(with_tools.model_extra["prompt_token_ids"]) > len(without.model_extra["prompt_token_ids"])


@pytest.mark.parametrize(
    "kwargs, status, param",
    [
        ({"temperature": 5}, 400, "temperature"),
        ({"presence_penalty": 0.5}, 400, "presence_penalty"),
        ({"extra_body": {"frobnicate": 1}}, 400, "frobnicate"),
        ({"top_logprobs": 3}, 400, "top_logprobs"),
        ({"model": "other/model"}, 404, "model"),
        ({"messages": []}, 400, "messages"),
        ({"stop": ["x" * 257]}, 400, "stop"),
        ({"stop": ["a", ""]}, 400, "stop"),
    ],
)
def test_bad_requests_get_openai_error_bodies_naming_the_field(client, kwargs, status, param):
    request = {"model": MODEL, "messages": MESSAGES, "max_tokens": 2, **kwargs}
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(**request)
    assert raised.value.status_code == status
    error = raised.value.body
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]


def test_an_out_of_vocabulary_prompt_is_a_400_and_fails_no_other_request(server, spread_tiny_model_dir):
    """The review's probe: three normal completions sent with one whose prompt is `[999999]` all got 500 (the bad id
    failed the decode batch they shared). Now the bad one gets 400 naming the prompt, before it joins any batch, and
    the others their usual (seeded) answers."""
    prompt_ids = list(load_tokenizer(spread_tiny_model_dir)("3+4=", add_special_tokens=False)["input_ids"])

    async def run():
        async with openai.AsyncOpenAI(base_url=server, api_key="unused", max_retries=0, timeout=60) as aclient:
            calls = [aclient.completions.create(model=MODEL, prompt=prompt_ids, max_tokens=4, seed=i) for i in range(3)]
            calls.insert(1, aclient.completions.create(model=MODEL, prompt=[999999], max_tokens=4, seed=9))
            return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(run())
    bad, good = results[1], results[:1] + results[2:]
    assert isinstance(bad, openai.BadRequestError) and bad.body["param"] == "prompt"
    assert "token id 999999 at position 0" in bad.body["message"]
    for seed, reply in enumerate(good):
        expected = _direct(spread_tiny_model_dir, prompt_ids, max_tokens=4, seed=seed)
        assert reply.choices[0].model_extra["token_ids"] == expected.response_ids[0]


def test_a_prompt_longer_than_the_context_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=MODEL, prompt=[5] * 600, max_tokens=1)
    assert refused.value.body["param"] == "prompt" and "max_model_len is 512" in refused.value.body["message"]


class RecordingTokenizer:
    """The server's tokenizer, recording how many ids each `decode` call got and whether it ran on an event loop."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple[int, bool]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, *args, **kwargs):
        return self.inner(*args, **kwargs)

    def decode(self, ids, **kwargs):
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        self.calls.append((len(ids), on_loop))
        return self.inner.decode(ids, **kwargs)


def test_streaming_decodes_a_bounded_window_off_the_event_loop(spread_tiny_model_dir):
    """The old stream re-decoded the whole prefix for every token on the event loop (0.06 / 0.25 / 0.99 s at 1k /
    2k / 4k tokens, blocking every other request). Now every decode the server makes sees at most
    2 * MAX_PENDING_TOKENS ids and runs in a worker thread, and the streamed text still equals the plain answer."""
    tokenizer = RecordingTokenizer(load_tokenizer(spread_tiny_model_dir))
    app = create_app(InferenceEngineClient([_engine(spread_tiny_model_dir)]), tokenizer, MODEL)
    body = {"model": MODEL, "prompt": "1+1=", "max_tokens": 200, "seed": 2, "logprobs": 1}
    with TestClient(app) as http:
        plain = http.post("/v1/completions", json=body).json()["choices"][0]
        assert len(plain["token_ids"]) == 200  # a long answer (this seed samples no eos)
        tokenizer.calls.clear()
        events = http.post("/v1/completions", json={**body, "stream": True}).text.split("\n\n")
    chunks = [json.loads(event[len("data: ") :]) for event in events if event.startswith("data: {")]
    assert "".join(chunk["choices"][0]["text"] for chunk in chunks) == plain["text"]
    assert len(tokenizer.calls) >= 200
    assert max(size for size, _ in tokenizer.calls) <= 16
    assert not any(on_loop for _, on_loop in tokenizer.calls)


def test_64_concurrent_clients_all_get_their_answer(server):
    async def run():
        async with openai.AsyncOpenAI(base_url=server, api_key="unused", max_retries=0, timeout=120) as aclient:
            calls = [
                aclient.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": f"{i}+{i}="}], max_tokens=4, seed=i
                )
                for i in range(64)
            ]
            return await asyncio.gather(*calls)

    responses = asyncio.run(run())
    assert len(responses) == 64 and len({r.id for r in responses}) == 64
    assert all(r.choices[0].model_extra["token_ids"] for r in responses)
    prompts = [r.model_extra["prompt_token_ids"] for r in responses]
    assert len({tuple(p) for p in prompts}) == 64  # each answer belongs to its own request


def test_litellm_completes_chat_and_completion_requests_with_logprobs(server, spread_tiny_model_dir):
    """litellm (a common harness client) through its OpenAI-compatible provider: the same tokens and logprobs as the
    engine gives directly. litellm fetches a model price list from the internet on import unless told not to."""
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm  # in skyrl-train's dev extra

    chat = litellm.completion(
        model=f"openai/{MODEL}",
        api_base=server,
        api_key="unused",
        messages=[{"role": "user", "content": "12+34="}],
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    tokens = chat.choices[0].logprobs["content"] if isinstance(chat.choices[0].logprobs, dict) else None
    tokens = tokens or chat.choices[0].logprobs.content
    assert chat.choices[0].message.content and len(tokens) >= 1 and len(tokens[0].top_logprobs) == 2
    prompt_ids = list(load_tokenizer(spread_tiny_model_dir)("12+34=")["input_ids"])
    text = litellm.text_completion(
        model=f"openai/{MODEL}",
        api_base=server,
        api_key="unused",
        prompt="12+34=",
        max_tokens=6,
        temperature=0,
        logprobs=1,
    )
    expected = _direct(spread_tiny_model_dir, prompt_ids, max_tokens=6, temperature=0.0)
    got = text.choices[0].logprobs.token_logprobs
    assert len(got) == len(expected.response_ids[0])
    assert got == pytest.approx(expected.response_logprobs[0], abs=1e-5)
