"""Tests of the sglang engine with the real SGLang on a CUDA GPU: logprobs against the HF forward pass, seeding,
stopping, concurrent calls, refusals, weight updates with checksums, pause/sleep/wake, and the `cuda_ipc` and
`broadcast` syncs into SGLang's own workers.

GPU only (SGLang needs CUDA): skipped here, run by `bash scripts/gpu_smoke.sh sglang_engine`. The model is a tiny Llama
(SGLang reads parameters back with `get_weights_by_name` only for Llama-family classes); one engine is shared by the
in-process tests, on one event loop for the module (SGLang's tokenizer manager binds its receive loop to the loop
of the first call).
"""

import asyncio
import importlib.util
import time

import pytest
import pytest_asyncio
import ray
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer
from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.weight_sync import WeightSenderHost, make_weight_sync_strategy

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.gpu,
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="SGLang is not installed (GPU only)"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="SGLang needs a CUDA GPU"),
    pytest.mark.asyncio(loop_scope="module"),
]
LOGPROB_TOLERANCE = 1e-3
"""fp32 on both sides, but SGLang's GPU kernels (and TF32 matmuls where enabled) against one CPU forward pass: the
tiny model's logits agree to ~1e-4; this leaves room, and a wrong token or distribution is off by far more."""
CONTEXT = 128


def _tiny_llama(seed: int) -> LlamaForCausalLM:
    """A 2-layer Llama with N(0, 0.5) weights (so greedy outputs vary) on the char tokenizer's vocabulary."""
    tokenizer = build_char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model


def _save(directory, seed):
    _tiny_llama(seed).save_pretrained(directory)
    save_tokenizer(build_char_tokenizer(), directory)
    return str(directory)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(tmp_path_factory):
    from skyrl_train.inference.sglang_convert import engine_kwargs
    from skyrl_train.inference.sglang_engine import SGLangInferenceEngine

    path = _save(tmp_path_factory.mktemp("tiny_llama"), 0)
    args = engine_kwargs(
        path, dtype="float32", gpu_memory_utilization=0.3, enforce_eager=True, extra={"context_length": CONTEXT}
    )
    engine = SGLangInferenceEngine(args)
    yield engine
    await engine.teardown()


@pytest_asyncio.fixture(loop_scope="module")
async def served(engine):
    """Load a fresh model (seed 0) into the engine and return it as the HF reference."""
    model = _tiny_llama(0)
    await engine.update_weights(model.state_dict().items(), version=engine.weight_version + 1)
    return model


def _prompts(tokenizer, count=3):
    return [list(tokenizer(f"{i}+{7 * i}=")["input_ids"]) for i in range(count)]


async def _run(engine, **kwargs):
    return await engine.generate(InferenceEngineInput(**kwargs))


@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
async def test_logprobs_match_the_hf_forward_pass(engine, served, tokenizer, temperature, max_logprob_error):
    prompts = _prompts(tokenizer)
    params = SamplingParams(max_tokens=12, temperature=temperature, n=2, seed=3, ignore_eos=True)
    output = await _run(engine, prompt_token_ids=prompts, sampling_params=params)
    assert len(output) == 6 and all(len(ids) == 12 for ids in output.response_ids)
    assert max_logprob_error(served, prompts, output, 2, temperature or 1.0) < LOGPROB_TOLERANCE
    if temperature == 0:
        reference = served.generate(torch.tensor([prompts[0]]), max_new_tokens=12, do_sample=False, pad_token_id=0)
        assert output.response_ids[0] == reference[0, len(prompts[0]) :].tolist()


async def test_seeded_samples_do_not_depend_on_the_batch(engine, served, tokenizer):
    prompts = _prompts(tokenizer)
    params = SamplingParams(max_tokens=10, temperature=1.0, n=2, ignore_eos=True)
    together = await _run(engine, prompt_token_ids=prompts, sampling_params=params, seeds=[5, 6, 7])
    alone = await _run(engine, prompt_token_ids=prompts[1:2], sampling_params=params, seeds=[6])
    assert together.response_ids[2:4] == alone.response_ids
    assert together.response_ids[2] != together.response_ids[3]  # sample j draws from seed + j
    four = SamplingParams(max_tokens=10, temperature=1.0, n=4, ignore_eos=True)
    unseeded = await _run(engine, prompt_token_ids=prompts[:1], sampling_params=four)
    assert len({tuple(ids) for ids in unseeded.response_ids}) > 1  # unseeded samples differ from each other


async def test_stop_strings_stop_tokens_and_the_context_limit(engine, served, tokenizer):
    prompt = _prompts(tokenizer, 1)
    free = await _run(engine, prompt_token_ids=prompt, sampling_params=SamplingParams(max_tokens=20, seed=1))
    text, ids = free.responses[0], free.response_ids[0]
    assert len(text) >= 4, text
    stop_text = text[2:4]
    cut = await _run(
        engine, prompt_token_ids=prompt, sampling_params=SamplingParams(max_tokens=20, seed=1, stop=(stop_text,))
    )
    assert cut.stop_reasons == ["stop"] and cut.responses[0] == text[: text.find(stop_text)]
    by_token = await _run(
        engine, prompt_token_ids=prompt, sampling_params=SamplingParams(max_tokens=20, seed=1, stop_token_ids=(ids[3],))
    )
    first = ids.index(ids[3])
    assert by_token.stop_reasons == ["stop"] and by_token.response_ids[0] == ids[: first + 1]
    long_prompt = (prompt[0] * 40)[:120]
    limited = await _run(
        engine, prompt_token_ids=[long_prompt], sampling_params=SamplingParams(max_tokens=50, ignore_eos=True)
    )
    assert limited.stop_reasons == ["length"] and len(long_prompt) + len(limited.response_ids[0]) == CONTEXT


async def test_concurrent_calls_and_message_prompts(engine, served):
    params = SamplingParams(max_tokens=8, temperature=0)
    messages = [[{"role": "user", "content": f"What is {i}+1?"}] for i in range(4)]
    calls = [engine.generate(InferenceEngineInput(prompts=[m], sampling_params=params)) for m in messages]
    outputs = await asyncio.gather(*calls)
    together = await _run(engine, prompts=messages, sampling_params=params)
    assert [o.response_ids[0] for o in outputs] == together.response_ids


async def test_what_sglang_cannot_do_is_refused_before_it_runs(engine, served, tokenizer):
    prompt = _prompts(tokenizer, 1)
    with pytest.raises(ValueError, match="repetition_penalty=1.5 is not supported by the sglang engine"):
        await _run(engine, prompt_token_ids=prompt, sampling_params=SamplingParams(repetition_penalty=1.5))
    with pytest.raises(ValueError, match=r"\['no_such_option'\] are not SGLang sampling params"):
        await _run(
            engine, prompt_token_ids=prompt, sampling_params=SamplingParams(additional_kwargs={"no_such_option": 1})
        )
    plain = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    base = await _run(engine, prompt_token_ids=prompt, sampling_params=plain)
    penalised = SamplingParams(
        max_tokens=12, temperature=0, ignore_eos=True, additional_kwargs={"presence_penalty": 2.0}
    )
    assert (await _run(engine, prompt_token_ids=prompt, sampling_params=penalised)).response_ids != base.response_ids


async def test_chunked_updates_then_checksums(engine, served, tokenizer, max_logprob_error):
    prompts = _prompts(tokenizer)
    other = _tiny_llama(99)
    items = list(other.state_dict().items())
    start_version = engine.weight_version
    for start in range(0, len(items), 3):
        final = start + 3 >= len(items)
        await engine.update_weights(items[start : start + 3], version=start_version + 1 if final else start_version)
    params = SamplingParams(max_tokens=10, seed=2, ignore_eos=True)
    output = await _run(engine, prompt_token_ids=prompts, sampling_params=params)
    assert output.weight_version == start_version + 1 == engine.weight_version
    assert max_logprob_error(other, prompts, output, 1, 1.0) < LOGPROB_TOLERANCE
    assert max_logprob_error(served, prompts, output, 1, 1.0) > 0.01  # the old weights would not fit
    checksums = await engine.weights_checksum()
    state = other.state_dict()
    assert set(checksums) == set(state)
    for name, value in checksums.items():
        assert value == pytest.approx(tensor_checksum(state[name]), rel=1e-9), name


async def _first_tokens_out(engine, running, count=3, fallback_s=0.15):
    """Wait until SGLang reports `count` tokens of a running request (or `fallback_s` passed: SGLang may hand a
    non-streamed request's tokens over only when it finishes), while the call is still running."""
    deadline = time.monotonic() + fallback_s
    while time.monotonic() < deadline and not running.done():
        if any(len(getattr(state, "output_ids", ())) >= count for state in list(engine.manager.rid_to_state.values())):
            return
        await asyncio.sleep(0.002)


async def test_an_in_flight_update_lands_between_two_tokens_and_each_token_keeps_its_version_and_logprob(
    engine, served, tokenizer, forward_logprobs
):
    prompts = _prompts(tokenizer, 2)
    new_model = _tiny_llama(7)
    old_version = engine.weight_version
    params = SamplingParams(max_tokens=110, temperature=1.0, n=2, ignore_eos=True)
    engine.in_flight_weight_updates = True  # the shared engine takes this one update between two tokens
    try:
        request = InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params, seeds=[5, 6])
        running = asyncio.create_task(engine.generate(request))
        await _first_tokens_out(engine, running)
        await engine.pause()  # returns at once: SGLang retracts the running requests, keeping their tokens
        assert not running.done()
        await engine.update_weights(new_model.state_dict().items(), version=old_version + 1)
        await engine.resume()  # SGLang prefills each request's prompt and tokens so far again, with the new weights
        out = await running
    finally:
        engine.in_flight_weight_updates = False
    assert out.weight_version == old_version  # the oldest version among the tokens
    spanning = 0
    rows = zip(out.response_ids, out.response_logprobs, out.response_token_versions, strict=True)
    for row, (ids, logprobs, versions) in enumerate(rows):
        assert len(versions) == len(ids) == 110 and versions == sorted(versions)
        assert set(versions) <= {old_version, old_version + 1}
        spanning += len(set(versions)) == 2
        for version, model in ((old_version, served), (old_version + 1, new_model)):  # each token against its version
            recomputed = forward_logprobs(model, prompts[row // 2], ids, 1.0)
            for position, token_version in enumerate(versions):
                if token_version == version:
                    assert abs(logprobs[position] - float(recomputed[position])) < LOGPROB_TOLERANCE, (row, position)
    assert spanning > 0, "the update landed before or after every row's tokens, not between two of them"


async def test_pause_sleep_and_wake(engine, served, tokenizer):
    prompt = _prompts(tokenizer, 1)
    greedy = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    await engine.pause()
    task = asyncio.create_task(_run(engine, prompt_token_ids=prompt, sampling_params=greedy))
    await asyncio.sleep(0.2)
    assert not task.done()
    await engine.resume()
    first = await task
    await engine.sleep(level=1)  # weights go to host memory; calls wait for wake_up
    held = asyncio.create_task(_run(engine, prompt_token_ids=prompt, sampling_params=greedy))
    await asyncio.sleep(0.2)
    assert not held.done()
    await engine.wake_up()
    assert (await held).response_ids == first.response_ids  # level 1 kept the weights
    await engine.sleep(level=2)
    await engine.wake_up()
    with pytest.raises(RuntimeError, match="call wake_up\\(\\) and update_weights\\(\\)"):
        await _run(engine, prompt_token_ids=prompt, sampling_params=greedy)
    await engine.update_weights(served.state_dict().items(), version=engine.weight_version + 1)
    assert (await _run(engine, prompt_token_ids=prompt, sampling_params=greedy)).response_ids == first.response_ids


class GpuPolicyStandIn(WeightSenderHost):
    """A pretend policy rank 0 on a GPU, holding a model and sending it through the strategy's sender."""

    def __init__(self, seed: int) -> None:
        self.model = _tiny_llama(seed).to("cuda")

    def push(self, version=None):
        """Send the model; returns (version, checksums of what was sent)."""
        result = self.weight_sender.send(self.model.state_dict().items(), version)
        return result.version, result.checksums


def _sglang_cfg():
    engine = {"backend": "sglang", "model_dtype": "bfloat16", "gpu_memory_utilization": 0.3, "enforce_eager": True}
    return {"generator": {"inference_engine": engine}, "trainer": {"device": "cuda"}}


@pytest.mark.parametrize("strategy_name, gpus_needed", [("cuda_ipc", 1), ("broadcast", 2)])
async def test_strategies_sync_into_sglang_workers(tmp_path, tokenizer, strategy_name, gpus_needed):
    """The sender (another actor, like policy rank 0) syncs twice into an SGLang engine actor; the engine then
    serves exactly the sent weights (checksums) at the sent version. cuda_ipc: both share one GPU; broadcast: one
    GPU each (NCCL wants one GPU per rank)."""
    from ray.util.placement_group import placement_group, remove_placement_group

    from skyrl_train.inference.ray_engine import create_engine_actors

    if torch.cuda.device_count() < gpus_needed:
        pytest.skip(f"{strategy_name} into SGLang needs {gpus_needed} GPU(s)")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, num_gpus=torch.cuda.device_count(), include_dashboard=False, log_to_driver=False)
    colocated = strategy_name == "cuda_ipc"
    group = placement_group([{"CPU": 2, "GPU": 1}] if colocated else [{"CPU": 1, "GPU": 1}] * 2)
    await group.ready()
    try:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        gpus = 0.5 if colocated else 1
        on_bundle = PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=0)
        sender = ray.remote(GpuPolicyStandIn).options(num_gpus=gpus, scheduling_strategy=on_bundle).remote(1)
        engines = create_engine_actors(
            1,
            _save(tmp_path / "a", 0),
            _sglang_cfg(),
            group,
            bundles=(0,) if colocated else (1,),
            num_gpus_per_engine=gpus,
        )
        strategy = make_weight_sync_strategy(strategy_name, chunk_bytes=64 * 1024, compute_checksums=True)
        await strategy.init(sender, engines)
        try:
            for _ in range(2):  # the second sync reuses the group (broadcast) and the engine's session handling
                version, checksums = await sender.push.remote()
                await strategy.confirm(version)
                report = await strategy.verify(checksums)
                assert report.ok and report.num_checked == len(checksums)
                request = InferenceEngineInput(
                    prompt_token_ids=_prompts(tokenizer), sampling_params=SamplingParams(max_tokens=4, temperature=0)
                )
                output = await engines[0].generate(request)
                assert output.weight_version == version and all(len(ids) == 4 for ids in output.response_ids)
        finally:
            await strategy.close()
            for engine in engines:
                await engine.teardown()
            ray.kill(sender)
    finally:
        remove_placement_group(group)
        if started:
            ray.shutdown()
