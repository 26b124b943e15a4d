"""Tests for the embedded hf engine on the tiny model: parity with HF generate and forward logprobs, stopping,
sampling options, batching of concurrent calls, and the sleep / pause / weight-update lifecycle."""

import asyncio
import copy
from dataclasses import replace

import pytest
import torch

from skyrl_train.inference.hf_decode import DecodeBatch
from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.types import InferenceEngineInput, InvalidRequest, SamplingParams
from skyrl_train.models.cpu_attention import CPU_SDPA
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

LOGPROB_TOLERANCE = 1e-5  # fp32: engine (incremental KV-cache decode) vs one full forward pass


@pytest.fixture
def model():
    return build_tiny_model(TinyModelSpec(size=2), seed=0)


def _prompts(tokenizer, count=4):
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"What is {i}+{7 * i}?"}], add_generation_prompt=True
        )
        for i in range(count)
    ]


def _ids(rendered):
    return list(rendered["input_ids"]) if hasattr(rendered, "keys") else list(rendered)


def admissions(monkeypatch) -> list[int]:
    """The number of rows each `DecodeBatch.admit` call prefilled (recorded as the engine runs)."""
    sizes: list[int] = []
    admit = DecodeBatch.admit

    def recording_admit(self, rows):
        if rows:
            sizes.append(len(rows))
        return admit(self, rows)

    monkeypatch.setattr(DecodeBatch, "admit", recording_admit)
    return sizes


def _run(engine, **kwargs):
    return asyncio.run(engine.generate(InferenceEngineInput(**kwargs)))


def test_greedy_matches_hf_generate_and_logprobs_match_forward(tokenizer, model):
    prompts = [_ids(p) for p in _prompts(tokenizer)]
    engine = HFInferenceEngine(model, tokenizer)
    out = _run(engine, prompt_token_ids=prompts, sampling_params=SamplingParams(max_tokens=16, temperature=0))
    for prompt, response, logprobs in zip(prompts, out.response_ids, out.response_logprobs):
        reference = model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, pad_token_id=0)
        assert response == reference[0, len(prompt) :].tolist()
        full = torch.tensor([prompt + response])
        with torch.no_grad():
            forward = torch.log_softmax(model(full).logits[0, len(prompt) - 1 : -1], -1)
        expected = forward.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)
        assert (expected - torch.tensor(logprobs)).abs().max().item() < LOGPROB_TOLERANCE


def test_message_prompts_n_samples_seed_and_prompt_major_order(tokenizer, model):
    engine = HFInferenceEngine(model, tokenizer)
    messages = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "yo"}]]
    params = SamplingParams(max_tokens=8, temperature=1.0, n=3, seed=11)
    first = _run(engine, prompts=messages, sampling_params=params)
    second = _run(engine, prompts=messages, sampling_params=params)
    assert len(first) == 6 and first.response_ids == second.response_ids
    greedy = _run(engine, prompts=messages, sampling_params=SamplingParams(max_tokens=8, temperature=0, n=2))
    assert greedy.response_ids[0] == greedy.response_ids[1]  # both samples belong to prompt 0


def test_stop_token_ids_stop_strings_and_length(tokenizer, model):
    engine = HFInferenceEngine(model, tokenizer)
    prompt = [_ids(_prompts(tokenizer, 1)[0])]
    free = _run(engine, prompt_token_ids=prompt, sampling_params=SamplingParams(max_tokens=12, temperature=0))
    assert free.stop_reasons == ["length"] and len(free.response_ids[0]) == 12
    third = free.response_ids[0][2]
    by_id = _run(
        engine,
        prompt_token_ids=prompt,
        sampling_params=SamplingParams(max_tokens=12, temperature=0, stop_token_ids=(third,)),
    )
    assert (
        by_id.stop_reasons == ["stop"]
        and by_id.response_ids[0] == free.response_ids[0][: free.response_ids[0].index(third) + 1]
    )
    text = tokenizer.decode(free.response_ids[0])
    stop = text[3:5]
    by_str = _run(
        engine, prompt_token_ids=prompt, sampling_params=SamplingParams(max_tokens=12, temperature=0, stop=(stop,))
    )
    assert by_str.stop_reasons == ["stop"]
    assert by_str.responses[0] == text[: text.index(stop)]


def test_a_stop_string_far_into_a_long_response_still_stops_it(tokenizer, model):
    """The stop-string check decodes only a row's last tokens each step; a match 30 tokens in is still found."""
    engine = HFInferenceEngine(model, tokenizer)
    prompt = [_ids(_prompts(tokenizer, 1)[0])]
    sampled = SamplingParams(max_tokens=48, temperature=1.0, seed=3, ignore_eos=True)
    free = _run(engine, prompt_token_ids=prompt, sampling_params=sampled)
    text = tokenizer.decode(free.response_ids[0], skip_special_tokens=True)
    stop = next(text[i : i + 3] for i in range(30, 44) if text.index(text[i : i + 3]) == i)  # first seen late
    out = _run(engine, prompt_token_ids=prompt, sampling_params=replace(sampled, stop=(stop,)))
    assert out.stop_reasons == ["stop"] and out.responses[0] == text[: text.index(stop)]


def test_prompt_longer_than_context_is_rejected(tokenizer, model):
    engine = HFInferenceEngine(model, tokenizer, max_model_len=10)
    with pytest.raises(ValueError, match="prompt 0 has 12 tokens; the engine's max_model_len is 10"):
        _run(engine, prompt_token_ids=[[5] * 12])
    near_limit = _run(engine, prompt_token_ids=[[5] * 8], sampling_params=SamplingParams(max_tokens=50, temperature=0))
    assert len(near_limit.response_ids[0]) <= 2 and near_limit.stop_reasons[0] in ("length", "stop")


def test_token_ids_outside_the_vocabulary_are_refused_before_any_batch(tokenizer, model, monkeypatch):
    engine = HFInferenceEngine(model, tokenizer)
    calls = admissions(monkeypatch)
    for bad, position in (([5, 6, 128], 2), ([-1, 5], 0), ([999999], 0)):
        with pytest.raises(InvalidRequest, match=f"prompt 0 holds token id {bad[position]} at position {position}"):
            _run(engine, prompt_token_ids=[bad])
    assert calls == []  # nothing reached a decode batch
    assert engine.vocab_size == 128 and len(_run(engine, prompt_token_ids=[[127]]).response_ids) == 1


def _good_and_bad_together(engine, good, bad, params):
    """One bad request among good ones, all queued before the drain starts (so they share one batch unless kept
    apart); returns each call's output or exception."""

    async def run():
        calls = [engine.generate(InferenceEngineInput(prompt_token_ids=[p], sampling_params=params)) for p in good]
        calls.insert(1, engine.generate(InferenceEngineInput(prompt_token_ids=[bad], sampling_params=params)))
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(run())
    return results[:1] + results[2:], results[1]


def test_a_request_that_fails_its_batch_fails_alone(tokenizer, model, monkeypatch):
    """The second line of defence: with the vocabulary check off, an out-of-range id reaches the batch and makes its
    forward raise (the embedding's IndexError). Its batch is served again in halves, so the three good requests get the
    same (seeded) answers they get alone, and only the bad one fails, with its own error."""
    prompts = [_ids(p) for p in _prompts(tokenizer, 3)]
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=11)
    alone = [_run(HFInferenceEngine(model, tokenizer), prompt_token_ids=[p], sampling_params=params) for p in prompts]
    engine = HFInferenceEngine(model, tokenizer, batch_wait_s=0.01)
    engine.vocab_size = None  # let the bad id through to the batch
    calls = admissions(monkeypatch)
    good, bad = _good_and_bad_together(engine, prompts, [5, 999999], params)
    assert isinstance(bad, IndexError)
    assert [output.response_ids for output in good] == [output.response_ids for output in alone]
    assert calls[0] == 4  # the four shared a batch first; the retries ran in smaller groups
    assert max(calls[1:]) <= 2


def test_concurrent_calls_share_batches_and_keep_their_own_results(tokenizer, model, monkeypatch):
    engine = HFInferenceEngine(model, tokenizer, batch_wait_s=0.01)
    prompts = [_ids(p) for p in _prompts(tokenizer, 6)]
    calls = admissions(monkeypatch)
    params = SamplingParams(max_tokens=6, temperature=0)

    async def many():
        return await asyncio.gather(
            *(engine.generate(InferenceEngineInput(prompt_token_ids=[p], sampling_params=params)) for p in prompts)
        )

    outputs = asyncio.run(many())
    assert calls == [6]  # six concurrent requests decoded as one batch
    together = _run(HFInferenceEngine(model, tokenizer), prompt_token_ids=prompts, sampling_params=params)
    assert [o.response_ids[0] for o in outputs] == together.response_ids


def test_update_weights_bumps_version_and_changes_output(tokenizer, model):
    engine = HFInferenceEngine(model, tokenizer)
    prompt = [_ids(_prompts(tokenizer, 1)[0])]
    greedy = SamplingParams(max_tokens=8, temperature=0)
    before = _run(engine, prompt_token_ids=prompt, sampling_params=greedy)
    other = build_tiny_model(TinyModelSpec(size=2), seed=99)
    asyncio.run(engine.update_weights(other.state_dict().items(), version=3))
    after = _run(engine, prompt_token_ids=prompt, sampling_params=greedy)
    assert before.weight_version == 0 and after.weight_version == 3 and engine.weight_version == 3
    expected = other.generate(torch.tensor(prompt), max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert after.response_ids[0] == expected[0, len(prompt[0]) :].tolist()
    checksums = asyncio.run(engine.weights_checksum(["model.norm.weight"]))
    assert list(checksums) == ["model.norm.weight"]
    with pytest.raises(ValueError, match="has no parameter 'model.nrom.weight'; close names: \\['model.norm.weight'"):
        asyncio.run(engine.update_weights([("model.nrom.weight", torch.ones(128))], version=4))
    with pytest.raises(ValueError, match="has shape \\(3,\\), the model expects \\(128,\\)"):
        asyncio.run(engine.update_weights([("model.norm.weight", torch.ones(3))], version=4))


@pytest.mark.parametrize(
    "bad, message",
    [
        (("bogus.weight", torch.zeros(1)), "the model has no parameter 'bogus.weight'"),
        (("model.layers.0.mlp.up_proj.weight", torch.zeros(2, 2)), "has shape \\(2, 2\\), the model expects"),
        (
            ("model.layers.0.mlp.up_proj.weight", torch.zeros(384, 128, dtype=torch.int64)),
            "has dtype torch.int64, the model expects a floating-point dtype",
        ),
    ],
    ids=["unknown name", "wrong shape", "integer dtype"],
)
def test_an_update_with_one_bad_tensor_changes_nothing(tokenizer, model, bad, message):
    """Two phases: every tensor is checked before the first is copied, so the good tensors sent before the bad one
    are not applied either, and the served version stays (the review's probe: model.norm.weight went to zeros)."""
    engine = HFInferenceEngine(model, tokenizer)
    before = asyncio.run(engine.weights_checksum())
    good = [(name, torch.zeros_like(tensor)) for name, tensor in model.state_dict().items()]
    with pytest.raises(ValueError, match=message):
        asyncio.run(engine.update_weights([*good, bad], version=5))
    assert asyncio.run(engine.weights_checksum()) == before
    assert engine.weight_version == 0


def test_sleep_level_two_discards_weights_until_a_full_update(tokenizer, model):
    engine = HFInferenceEngine(model, tokenizer)
    prompt = [_ids(_prompts(tokenizer, 1)[0])]
    greedy = SamplingParams(max_tokens=6, temperature=0)
    reference = _run(engine, prompt_token_ids=prompt, sampling_params=greedy)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    assert any(name not in saved for name in buffers)  # a non-persistent buffer no weight sync would ever send

    async def cycle():
        await engine.sleep(level=2)
        assert next(engine.model.parameters()).device.type == "meta"
        await engine.wake_up()
        # Buffers come back exactly, not as whatever memory to_empty happened to hand out.
        for name, value in engine.model.named_buffers():
            assert torch.equal(value, buffers[name]), name
        with pytest.raises(RuntimeError, match="weights were discarded"):
            await engine.generate(InferenceEngineInput(prompt_token_ids=prompt, sampling_params=greedy))
        with pytest.raises(ValueError, match="must send every parameter"):
            await engine.update_weights([("model.norm.weight", saved["model.norm.weight"])], version=1)
        await engine.update_weights(saved.items(), version=2)
        return await engine.generate(InferenceEngineInput(prompt_token_ids=prompt, sampling_params=greedy))

    restored = asyncio.run(cycle())
    assert restored.response_ids == reference.response_ids and restored.weight_version == 2


def test_pause_holds_new_calls_until_resume(tokenizer, model):
    engine = HFInferenceEngine(model, tokenizer)
    prompt = [_ids(_prompts(tokenizer, 1)[0])]

    async def scenario():
        await engine.pause()
        task = asyncio.create_task(
            engine.generate(InferenceEngineInput(prompt_token_ids=prompt, sampling_params=SamplingParams(max_tokens=3)))
        )
        await asyncio.sleep(0.05)
        held = not task.done()
        await engine.resume()
        out = await task
        return held, out

    held, out = asyncio.run(scenario())
    assert held and len(out.response_ids[0]) >= 1


def test_seeded_requests_sample_the_same_tokens_alone_or_batched(tokenizer, model, monkeypatch):
    engine = HFInferenceEngine(model, tokenizer, batch_wait_s=0.01)
    prompts = [_ids(p) for p in _prompts(tokenizer, 4)]

    def params(seed):
        return SamplingParams(max_tokens=8, temperature=1.0, seed=seed)

    alone = [
        _run(engine, prompt_token_ids=[p], sampling_params=params(10 + i)).response_ids[0]
        for i, p in enumerate(prompts)
    ]

    async def together():
        calls = [
            engine.generate(InferenceEngineInput(prompt_token_ids=[p], sampling_params=params(10 + i)))
            for i, p in enumerate(prompts)
        ]
        return [out.response_ids[0] for out in await asyncio.gather(*calls)]

    assert asyncio.run(together()) == alone
    assert len({tuple(ids) for ids in alone}) > 1  # different seeds really sample differently

    # one call carrying a seed per prompt decodes as one batch and samples what the separate calls sampled
    batches = admissions(monkeypatch)
    one_call = _run(engine, prompt_token_ids=prompts, sampling_params=params(None), seeds=[10, 11, 12, 13])
    assert one_call.response_ids == alone and batches == [4]
    with pytest.raises(ValueError, match="3 seeds for 4 prompts"):
        InferenceEngineInput(prompt_token_ids=prompts, seeds=[1, 2, 3])


def test_compute_clock_counts_decode_time_and_starts_over_when_read(tokenizer, model):
    engine = HFInferenceEngine(model, tokenizer)
    assert engine.compute_clock.take() == {}
    _run(
        engine, prompt_token_ids=[_ids(p) for p in _prompts(tokenizer, 2)], sampling_params=SamplingParams(max_tokens=4)
    )
    seconds = engine.compute_clock.take()
    assert seconds["generate"] > 0 and engine.compute_clock.take() == {}


def test_top_logprobs_equal_topk_of_a_plain_forward(tokenizer, model, check_top_logprobs):
    prompts = [_ids(p) for p in _prompts(tokenizer, 2)]
    engine = HFInferenceEngine(model, tokenizer)
    params = SamplingParams(max_tokens=8, temperature=1.0, top_logprobs=3, seed=5)
    out = _run(engine, prompt_token_ids=prompts, sampling_params=params)
    assert out.response_top_logprobs is not None
    check_top_logprobs(model, prompts, out, k=3, tolerance=LOGPROB_TOLERANCE)
    plain = _run(engine, prompt_token_ids=prompts, sampling_params=SamplingParams(max_tokens=8, seed=5))
    assert plain.response_top_logprobs is None


def test_repetition_penalty_follows_the_rule_on_prompt_and_generated_tokens(tokenizer, model, penalised_greedy):
    prompt = _ids(_prompts(tokenizer, 1)[0])
    engine = HFInferenceEngine(model, tokenizer)
    penalty = 3.0  # the tiny model favours token 6 (logit 1.37, in the prompt) over the next (0.58): 3 flips it
    params = SamplingParams(max_tokens=12, temperature=0, repetition_penalty=penalty, ignore_eos=True)
    out = _run(engine, prompt_token_ids=[prompt], sampling_params=params)
    response, logprobs = out.response_ids[0], out.response_logprobs[0]
    expected_ids, expected_logprobs = penalised_greedy(model, prompt, penalty, 12)
    assert response == expected_ids
    assert max(abs(a - b) for a, b in zip(logprobs, expected_logprobs)) < LOGPROB_TOLERANCE
    unpenalised = _run(
        engine, prompt_token_ids=[prompt], sampling_params=SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    )
    assert unpenalised.response_ids[0] != response  # the penalty changed what was generated


def test_additional_kwargs_are_refused_by_name(tokenizer, model):
    engine = HFInferenceEngine(model, tokenizer)
    params = SamplingParams(max_tokens=4, additional_kwargs={"presence_penalty": 0.5, "bad_words": ["x"]})
    with pytest.raises(
        ValueError, match=r"does not support the sampling arguments \['bad_words', 'presence_penalty'\]"
    ):
        _run(engine, prompt_token_ids=[_ids(_prompts(tokenizer, 1)[0])], sampling_params=params)


def test_the_engine_attends_with_grouped_heads_and_samples_what_plain_sdpa_does(tokenizer, model):
    """The engine switches its grouped-query model to `CPU_SDPA` (no copy of the KV cache per decode step); a
    copy switched back to transformers' `sdpa` samples the same tokens with the same logprobs."""
    reference = copy.deepcopy(model)
    engine = HFInferenceEngine(model, tokenizer)
    assert engine.cpu_attention and model.config._attn_implementation == CPU_SDPA
    plain = HFInferenceEngine(reference, tokenizer)
    reference.set_attn_implementation("sdpa")
    prompts = [_ids(p) for p in _prompts(tokenizer, count=3)]  # different lengths: left-padded, so masked
    params = SamplingParams(max_tokens=40, temperature=1.0, n=2, seed=5, ignore_eos=True)
    got = _run(engine, prompt_token_ids=prompts, sampling_params=params)
    expected = _run(plain, prompt_token_ids=prompts, sampling_params=params)
    assert got.response_ids == expected.response_ids
    for ours, theirs in zip(got.response_logprobs, expected.response_logprobs):
        torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs), atol=1e-6, rtol=0)
