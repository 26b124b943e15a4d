"""The OpenAI-compatible server for real: uvicorn on 127.0.0.1 over an in-process hf engine with a tiny model,
driven by the official `openai` client (sync and async). Seeded requests are checked against a direct engine call
with the same sampling, so the server reports exactly the engine's tokens and logprobs."""

import asyncio
import socket
import threading
import time

import openai
import pytest
import torch
import uvicorn

from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.loading import load_causal_lm, load_tokenizer
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer
from skyrl_train.serving import create_app
from skyrl_train.serving.app import _pieces

MODEL = "skyrl/tiny"
MESSAGES = [{"role": "user", "content": "12+34="}]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("serve_model")
    model = build_tiny_model(TinyModelSpec(size=1), seed=0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.3, generator=generator)  # varied samples, not one repeated token
    model.save_pretrained(path)
    save_tokenizer(build_char_tokenizer(), str(path))
    return str(path)


def _engine(model_dir):
    return HFInferenceEngine(load_causal_lm(model_dir, dtype="float32"), load_tokenizer(model_dir))


@pytest.fixture(scope="module")
def server(model_dir):
    """The app on a free port in a background thread; yields its base URL."""
    torch.set_num_threads(1)
    app = create_app(InferenceEngineClient([_engine(model_dir)]), load_tokenizer(model_dir), MODEL)
    port = _free_port()
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


def _direct(model_dir, prompt_ids, **sampling):
    """The engine's own answer to the same request (a second engine on the same weights)."""
    request = InferenceEngineInput(prompt_token_ids=[prompt_ids], sampling_params=SamplingParams(**sampling))
    return asyncio.run(_engine(model_dir).generate(request))


def test_models_lists_the_served_name(client):
    assert [model.id for model in client.models.list().data] == [MODEL]


def test_chat_returns_the_engines_tokens_and_logprobs(client, model_dir):
    response = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=6, temperature=1.0, n=2, seed=7, logprobs=True, top_logprobs=2
    )
    extra = response.model_extra
    tokenizer = load_tokenizer(model_dir)
    expected_prompt = list(
        tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)["input_ids"]
    )
    assert extra["prompt_token_ids"] == expected_prompt
    direct = _direct(model_dir, expected_prompt, max_tokens=6, temperature=1.0, n=2, seed=7, top_logprobs=2)
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


def test_completion_with_text_prompt_logprobs_and_stop(client, model_dir):
    response = client.completions.create(model=MODEL, prompt="7+8=", max_tokens=8, seed=3, logprobs=2, stop=["\n"])
    choice = response.choices[0]
    prompt_ids = list(load_tokenizer(model_dir)("7+8=", add_special_tokens=False)["input_ids"])
    assert response.model_extra["prompt_token_ids"] == prompt_ids
    direct = _direct(model_dir, prompt_ids, max_tokens=8, seed=3, top_logprobs=2, stop=("\n",))
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


def test_stream_pieces_skip_special_tokens_as_the_engines_text_does():
    """A special token sampled mid-response (the tiny model samples any id) adds no text to the stream, so the pieces
    still join to the engine's text (decoded with `skip_special_tokens=True`). Found when a seeded request sampled
    `<|endoftext|>` first and the stream began with '<|endof'."""
    tokenizer = build_char_tokenizer()
    special = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    ids = [
        special,
        *tokenizer.encode("Yf", add_special_tokens=False),
        special,
        *tokenizer.encode("B", add_special_tokens=False),
    ]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    pieces = _pieces(tokenizer, ids, text)
    assert text == "YfB" and pieces == ["", "Y", "f", "", "B"]


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
    ],
)
def test_bad_requests_get_openai_error_bodies_naming_the_field(client, kwargs, status, param):
    request = {"model": MODEL, "messages": MESSAGES, "max_tokens": 2, **kwargs}
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(**request)
    assert raised.value.status_code == status
    error = raised.value.body
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]


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


def test_litellm_completes_chat_and_completion_requests_with_logprobs(server, model_dir):
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
    prompt_ids = list(load_tokenizer(model_dir)("12+34=")["input_ids"])
    text = litellm.text_completion(
        model=f"openai/{MODEL}",
        api_base=server,
        api_key="unused",
        prompt="12+34=",
        max_tokens=6,
        temperature=0,
        logprobs=1,
    )
    expected = _direct(model_dir, prompt_ids, max_tokens=6, temperature=0.0)
    got = text.choices[0].logprobs.token_logprobs
    assert len(got) == len(expected.response_ids[0])
    assert got == pytest.approx(expected.response_logprobs[0], abs=1e-5)
