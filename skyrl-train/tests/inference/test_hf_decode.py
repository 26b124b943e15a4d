"""Continuous batching in the hf engine: rows that join a running decode (cache left-padded and stacked) or leave it
early sample what they would alone, finished requests return while others still decode, a weight update lets the
running decode finish on the old weights (or, with in-flight updates, lands between two of its tokens), and
`max_batch_size` refills freed places."""

import asyncio
import time
from dataclasses import replace

import pytest
import torch

from skyrl_train.inference.hf_decode import DecodeBatch, DecodeRow
from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.sampling import seeded_uniforms
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

LOGPROB_TOLERANCE = 1e-4  # fp32: left padding changes the summation order of attention, nothing else


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(TinyModelSpec(size=2), seed=0)


def prompt_ids(tokenizer, text: str) -> list[int]:
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    return list(rendered["input_ids"]) if hasattr(rendered, "keys") else list(rendered)


def alone(model, tokenizer, prompt, params, budget, uniforms=None) -> DecodeRow:
    """Decode one row in a batch of its own."""
    batch = DecodeBatch(model, params, set(), tokenizer.pad_token_id, tokenizer)
    row = DecodeRow(prompt, budget, uniforms)
    batch.admit([row])
    while len(batch):
        batch.step()
    return row


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_rows_joining_mid_decode_sample_what_they_would_alone(model, tokenizer, temperature):
    params = SamplingParams(max_tokens=12, temperature=temperature, ignore_eos=True)
    short, long = prompt_ids(tokenizer, "1+1?"), prompt_ids(tokenizer, "What is 12345 + 67890 - 4444 + 3?")
    numbers = [torch.rand(12, generator=torch.Generator().manual_seed(seed)) for seed in range(3)]
    expected = [alone(model, tokenizer, p, params, 12, u) for p, u in zip([short, long, short], numbers)]

    batch = DecodeBatch(model, params, set(), tokenizer.pad_token_id, tokenizer)
    rows = [DecodeRow(p, 12, u) for p, u in zip([short, long, short], numbers)]
    batch.admit([rows[0]])
    for _ in range(3):
        batch.step()
    batch.admit([rows[1]])  # a longer prompt: the running row's cache is left-padded to its width
    for _ in range(4):
        batch.step()
    batch.admit([rows[2]])  # a shorter prompt: its own cache is left-padded to the batch's width
    while len(batch):
        batch.step()
    for row, reference in zip(rows, expected):
        assert row.tokens == reference.tokens and row.reason == "length"
        assert row.logprobs == pytest.approx(reference.logprobs, abs=LOGPROB_TOLERANCE)


def test_finished_rows_leave_and_the_left_padding_they_needed_goes_with_them(model, tokenizer):
    params = SamplingParams(max_tokens=20, temperature=0, ignore_eos=True)
    short, long = prompt_ids(tokenizer, "1+1?"), prompt_ids(tokenizer, "What is 12345 + 67890 - 4444 + 3?")
    expected = alone(model, tokenizer, short, params, 20)
    batch = DecodeBatch(model, params, set(), tokenizer.pad_token_id, tokenizer)
    rows = [DecodeRow(short, 20), DecodeRow(long, 2)]
    batch.admit(rows)
    assert batch.attention.shape[1] == len(long)
    finished = [batch.step(), batch.step()]
    assert finished == [[], [rows[1]]] and len(batch) == 1
    assert batch.attention.shape[1] == len(short) + 2  # the columns only the long prompt used are gone
    assert all(layer.keys.shape[-2] == len(short) + 2 for layer in batch.cache.layers)
    while len(batch):
        batch.step()
    assert rows[0].tokens == expected.tokens


def test_a_request_that_arrives_mid_decode_joins_it_and_a_short_one_returns_first(model, tokenizer, monkeypatch):
    engine = HFInferenceEngine(model, tokenizer, max_model_len=100)
    params = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
    long_prompt = prompt_ids(tokenizer, "Tell me a story.")
    near_limit = prompt_ids(tokenizer, "x" * (96 - len(long_prompt)) + "Tell me a story.")  # budget 100 - 96
    admitted, steps = [], []
    admit, step = DecodeBatch.admit, DecodeBatch.step
    monkeypatch.setattr(
        DecodeBatch, "admit", lambda self, rows: (admitted.append((len(steps), len(rows))), admit(self, rows))[1]
    )
    monkeypatch.setattr(DecodeBatch, "step", lambda self: (steps.append(len(self)), step(self))[1])
    finished_order = []

    async def call(prompt, delay):
        await asyncio.sleep(delay)
        out = await engine.generate(InferenceEngineInput(prompt_token_ids=[prompt], sampling_params=params))
        finished_order.append(prompt is near_limit)
        return out

    async def both():
        first = asyncio.create_task(call(long_prompt, 0))
        while len(steps) < 5:  # the first request is decoding
            await asyncio.sleep(0.001)
        second = await call(near_limit, 0)
        return await first, second

    first, second = asyncio.run(both())
    assert len(first.response_ids[0]) == 40 and len(second.response_ids[0]) == 4
    joined_at = [at for at, count in admitted if count][1]
    assert 5 <= joined_at < 40 and max(steps) == 2  # joined the running batch instead of waiting for it to end
    assert finished_order == [True, False]  # the short completion came back while the long one still decoded
    assert first.response_ids[0] == engine.generate_batch([long_prompt], params)[0][1]


def test_a_batched_request_decodes_in_one_model_thread_call_without_the_batch_wait(model, tokenizer, monkeypatch):
    # batch_wait_s gathers concurrent single-completion calls; a call that brings several prompts starts at once,
    # and with no one else waiting its whole decode is one hop to the model thread instead of one per token
    engine = HFInferenceEngine(model, tokenizer, batch_wait_s=0.05)
    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    prompts = [prompt_ids(tokenizer, f"What is {i}+{i}?") for i in range(3)]
    hops, sleeps = [], []
    in_model_thread = engine._in_model_thread

    async def counted(function, *args):
        hops.append(function.__name__)
        return await in_model_thread(function, *args)

    engine._in_model_thread = counted
    real_sleep = asyncio.sleep

    async def recorded_sleep(seconds, *args):
        sleeps.append(seconds)
        return await real_sleep(seconds, *args)

    monkeypatch.setattr("skyrl_train.inference.queued_engine.asyncio.sleep", recorded_sleep)
    batched = asyncio.run(engine.generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params)))
    assert hops == ["_advance_locked"] and sleeps == []
    assert batched.response_ids == [row[1] for row in engine.generate_batch(prompts, params)]
    assert all(len(ids) == 6 for ids in batched.response_ids)

    hops.clear()
    single = asyncio.run(engine.generate(InferenceEngineInput(prompt_token_ids=prompts[:1], sampling_params=params)))
    assert sleeps == [0.05] and hops == ["_advance_locked"]  # a single completion waits for company first
    assert single.response_ids[0] == batched.response_ids[0]


def test_a_weight_update_waits_for_the_running_decode_and_later_requests_use_it(tokenizer):
    engine = HFInferenceEngine(build_tiny_model(TinyModelSpec(size=2), seed=0), tokenizer)
    params = SamplingParams(max_tokens=30, temperature=0, ignore_eos=True)
    prompt = prompt_ids(tokenizer, "Tell me a story.")
    old = engine.generate_batch([prompt], params)[0][2]  # logprobs: they tell the two models apart
    new_weights = list(build_tiny_model(TinyModelSpec(size=2), seed=7).state_dict().items())
    new = HFInferenceEngine(build_tiny_model(TinyModelSpec(size=2), seed=7), tokenizer).generate_batch([prompt], params)
    assert new[0][2] != pytest.approx(old, abs=1e-3)

    async def scenario():
        request = InferenceEngineInput(prompt_token_ids=[prompt], sampling_params=params)
        running = asyncio.create_task(engine.generate(request))
        while not engine._decoding:
            await asyncio.sleep(0.001)
        await engine.update_weights(new_weights, version=1)
        return await running, await engine.generate(request)

    during, after = asyncio.run(scenario())
    assert during.response_logprobs[0] == pytest.approx(old, abs=LOGPROB_TOLERANCE) and during.weight_version == 0
    assert after.response_logprobs[0] == pytest.approx(new[0][2], abs=LOGPROB_TOLERANCE) and after.weight_version == 1


def test_an_in_flight_update_lands_between_two_tokens_and_each_token_keeps_its_version_and_logprob(
    tokenizer, monkeypatch
):
    old_model = build_tiny_model(TinyModelSpec(size=2), seed=0)
    new_model = build_tiny_model(TinyModelSpec(size=2), seed=7)
    engine = HFInferenceEngine(
        build_tiny_model(TinyModelSpec(size=2), seed=0), tokenizer, in_flight_weight_updates=True
    )
    params = SamplingParams(max_tokens=16, temperature=1.0, ignore_eos=True, logprobs=True)
    prompts = [prompt_ids(tokenizer, "Tell me a story."), prompt_ids(tokenizer, "What is 12+34?")]
    advances = []
    step = DecodeBatch.step

    def counted(batch):  # runs in the engine's model thread
        out = step(batch)
        advances.append(len(batch))
        if len(advances) == 3:  # hold the third step until the update is queued behind it in the model thread
            deadline = time.monotonic() + 30
            while not engine._weights_waiting and time.monotonic() < deadline:
                time.sleep(0.001)
        return out

    monkeypatch.setattr(DecodeBatch, "step", counted)

    async def scenario():
        request = InferenceEngineInput(prompt_token_ids=prompts, sampling_params=replace(params, n=2), seeds=[5, 6])
        running = asyncio.create_task(engine.generate(request))
        while len(advances) < 2:
            await asyncio.sleep(0.001)
        await engine.pause()  # returns at once: the running call goes on and takes the update between two tokens
        assert not running.done()
        await engine.update_weights(list(new_model.state_dict().items()), version=1)
        await engine.resume()
        return await running

    out = asyncio.run(scenario())
    assert out.weight_version == 0  # the oldest version among the tokens
    rows = zip(out.response_ids, out.response_logprobs, out.response_token_versions, strict=True)
    for row, (ids, logprobs, versions) in enumerate(rows):
        assert versions == [0] * 3 + [1] * 13  # three tokens before the update, the rest after
        for version, model in ((0, old_model), (1, new_model)):  # each token against a fresh forward of its version
            sequence = torch.tensor([prompts[row // 2] + ids])  # prompt-major: two samples per prompt
            start = sequence.shape[1] - len(ids)
            with torch.no_grad():
                logits = model(sequence).logits[0, start - 1 : -1].float()
            recomputed = torch.log_softmax(logits, -1).gather(-1, sequence[0, start:].unsqueeze(-1)).squeeze(-1)
            for position, token_version in enumerate(versions):
                if token_version == version:
                    assert logprobs[position] == pytest.approx(float(recomputed[position]), abs=LOGPROB_TOLERANCE)


def test_recompute_with_unchanged_weights_keeps_what_the_batch_samples(model, tokenizer):
    params = SamplingParams(max_tokens=10, temperature=1.0, ignore_eos=True)
    numbers = torch.rand(10, generator=torch.Generator().manual_seed(1))
    prompt = prompt_ids(tokenizer, "12+34=")
    expected = alone(model, tokenizer, prompt, params, 10, numbers)
    batch = DecodeBatch(model, params, set(), tokenizer.pad_token_id, tokenizer)
    row = DecodeRow(prompt, 10, numbers)
    batch.admit([row])
    for _ in range(4):
        batch.step()
    batch.recompute(version=3)  # the cache is rebuilt from the prompt and the four tokens so far
    while len(batch):
        batch.step()
    assert row.tokens == expected.tokens and row.versions == [0] * 4 + [3] * 6
    assert row.logprobs == pytest.approx(expected.logprobs, abs=LOGPROB_TOLERANCE)


def test_max_batch_size_refills_freed_places_and_keeps_each_rows_result(model, tokenizer, monkeypatch):
    params = SamplingParams(max_tokens=8, temperature=0)
    prompts = [prompt_ids(tokenizer, f"What is {i}+{7 * i}?") for i in range(5)]
    wide = HFInferenceEngine(model, tokenizer).generate_batch(prompts, params)
    admitted = []
    admit = DecodeBatch.admit
    monkeypatch.setattr(DecodeBatch, "admit", lambda self, rows: (admitted.append(len(rows)), admit(self, rows))[1])
    narrow = HFInferenceEngine(model, tokenizer, max_batch_size=2).generate_batch(prompts, params)
    assert [row[1] for row in narrow] == [row[1] for row in wide]
    assert admitted[0] == 2 and sum(admitted) == 5 and max(admitted) <= 2


def test_rows_that_repeat_a_prompt_share_one_prefill_and_sample_what_they_would_alone(model, tokenizer, monkeypatch):
    params = SamplingParams(max_tokens=6, temperature=1.0, ignore_eos=True)
    first, second = prompt_ids(tokenizer, "12+34="), prompt_ids(tokenizer, "What is 7 + 8?")
    prompts = [first, first, first, second, second, first]
    numbers = [torch.rand(6, generator=torch.Generator().manual_seed(seed)) for seed in range(len(prompts))]
    expected = [alone(model, tokenizer, p, params, 6, u) for p, u in zip(prompts, numbers)]

    prefill_rows = []
    forward = model.forward

    def counting_forward(*args, **kwargs):
        if kwargs["input_ids"].shape[1] > 1:  # a prefill (decode steps feed one token per row)
            prefill_rows.append(kwargs["input_ids"].shape[0])
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting_forward)
    batch = DecodeBatch(model, params, set(), tokenizer.pad_token_id, tokenizer)
    rows = [DecodeRow(p, 6, u) for p, u in zip(prompts, numbers)]
    batch.admit(rows)
    while len(batch):
        batch.step()
    assert prefill_rows == [2]  # two distinct prompts prefilled, for six rows
    for row, reference in zip(rows, expected):
        assert row.tokens == reference.tokens
        assert row.logprobs == pytest.approx(reference.logprobs, abs=LOGPROB_TOLERANCE)


def test_a_seeded_row_samples_what_its_stream_as_explicit_numbers_samples(model, tokenizer):
    """Rows carrying a seed (the engine's rows) draw `seeded_uniforms`, all in one call or mixed with other rows."""
    params = SamplingParams(max_tokens=8, temperature=1.0, ignore_eos=True)
    prompts = [prompt_ids(tokenizer, "1+1?"), prompt_ids(tokenizer, "What is 12345 + 67890?")]
    expected = [
        alone(model, tokenizer, p, params, 8, seeded_uniforms([seed], 8)[0]) for p, seed in zip(prompts, (3, 4))
    ]
    for rows in (
        [DecodeRow(prompts[0], 8, seed=3), DecodeRow(prompts[1], 8, seed=4)],
        [DecodeRow(prompts[0], 8, seed=3), DecodeRow(prompts[1], 8, seeded_uniforms([4], 8)[0])],
    ):
        batch = DecodeBatch(model, params, set(), tokenizer.pad_token_id, tokenizer)
        batch.admit(rows)
        while len(batch):
            batch.step()
        assert [row.tokens for row in rows] == [row.tokens for row in expected]
    assert expected[0].tokens != alone(model, tokenizer, prompts[0], params, 8, seeded_uniforms([5], 8)[0]).tokens


def test_a_prefill_computes_logits_for_the_last_position_only(model, tokenizer):
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    prompt = prompt_ids(tokenizer, "12+34=")
    expected = model(input_ids=torch.tensor([prompt])).logits[0, -1]
    head_positions = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda module, inputs, output: head_positions.append(inputs[0].shape[1])
    )
    try:
        batch = DecodeBatch(model, params, set(), tokenizer.pad_token_id, tokenizer)
        batch.admit([DecodeRow(prompt, 3)])
        prefill_logits = batch.logits[0].clone()
    finally:
        hook.remove()
    assert len(prompt) > 1 and head_positions == [1]  # not one row of vocabulary logits per prompt token
    torch.testing.assert_close(prefill_logits, expected, rtol=1e-5, atol=1e-5)
