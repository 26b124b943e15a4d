"""Tests for InferenceEngineClient: session affinity, order reassembly, and lifecycle fan-out over real engines."""

import asyncio

import torch

from skyrl_train.inference.client import InferenceEngineClient, merge_parts
from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer


def _engines(count=2):
    tokenizer = build_char_tokenizer()
    return [HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=0), tokenizer) for _ in range(count)]


def test_sessions_stick_to_one_engine_and_outputs_come_back_in_prompt_order():
    engines = _engines()
    seen = {0: [], 1: []}
    for index, engine in enumerate(engines):
        original = engine.generate

        async def recording(request, _index=index, _original=original):
            seen[_index].extend(request.session_ids or [])
            return await _original(request)

        engine.generate = recording
    client = InferenceEngineClient(engines)
    prompts = [[3, 10 + i, 11, 4] for i in range(6)]
    sessions = ["a", "b", "c", "a", "b", "c"]
    params = SamplingParams(max_tokens=5, temperature=0, n=2)
    out = asyncio.run(
        client.generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params, session_ids=sessions))
    )
    for session in "abc":
        owners = {i for i, ids in seen.items() if session in ids}
        assert owners == {client.engine_for(session)}
    direct = asyncio.run(engines[0].generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params)))
    assert out.response_ids == direct.response_ids  # same weights, greedy: order must be prompt-major as if one engine


def test_weight_updates_reach_every_engine():
    client = InferenceEngineClient(_engines())
    new = build_tiny_model(TinyModelSpec(size=1), seed=5).state_dict()
    asyncio.run(client.update_weights(new.items(), version=7))
    assert client.weight_versions == [7, 7]
    sums = asyncio.run(client.weights_checksums())
    assert sums[0] == sums[1]
    assert torch.equal(client.engines[1].model.state_dict()["model.norm.weight"], new["model.norm.weight"])


def _recording(engines):
    """Each engine's generate records the prompts it was sent."""
    seen = {index: [] for index in range(len(engines))}
    for index, engine in enumerate(engines):
        original = engine.generate

        async def recording(request, _index=index, _original=original):
            seen[_index].append(request.prompt_token_ids)
            return await _original(request)

        engine.generate = recording
    return seen


def test_the_samples_of_a_prompt_go_to_one_engine_and_the_engines_get_equal_shares():
    engines = _engines()
    seen = _recording(engines)
    client = InferenceEngineClient(engines)
    groups = [[3, 10 + g, 11, 4] for g in range(4)]
    # rows as the batched generator sends them (a group's samples adjacent), then one interleaved call
    adjacent = [prompt for prompt in groups for _ in range(4)]
    interleaved = [groups[i % 4] for i in range(16)]
    params = SamplingParams(max_tokens=4, temperature=0)
    for prompts in (adjacent, interleaved):
        for engine_seen in seen.values():
            engine_seen.clear()
        out = asyncio.run(client.generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params)))
        sent = {index: [tuple(p) for call in calls for p in call] for index, calls in seen.items()}
        assert sorted(len(rows) for rows in sent.values()) == [8, 8]
        assert not set(sent[0]) & set(sent[1])  # every group on one engine: each engine prefills 2 prompts, not 4
        direct = asyncio.run(
            engines[0].generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params))
        )
        assert out.response_ids == direct.response_ids  # reassembled in the caller's order


def test_single_prompt_calls_take_the_engines_in_turn():
    engines = _engines()
    seen = _recording(engines)
    client = InferenceEngineClient(engines)
    params = SamplingParams(max_tokens=3, temperature=0)
    for index in range(4):
        asyncio.run(
            client.generate(InferenceEngineInput(prompt_token_ids=[[3, 10 + index, 4]], sampling_params=params))
        )
    assert [len(calls) for calls in seen.values()] == [2, 2]
    # fewer distinct rows than engines in one call: no engine gets an empty call
    asyncio.run(
        client.generate(InferenceEngineInput(prompt_token_ids=[[3, 5, 4]] * 2 + [[3, 6, 4]], sampling_params=params))
    )
    assert all(all(call for call in calls) for calls in seen.values())


def test_parts_come_as_each_engine_finishes_and_merge_into_the_generate_output():
    """`generate_parts` yields an engine's part while another engine is still busy (here held until the first part
    was taken), and its parts, merged, are exactly `generate`'s output."""
    engines = _engines()
    client = InferenceEngineClient(engines)
    prompts = [[3, 10 + i, 11, 4] for i in range(6)]
    request = InferenceEngineInput(
        prompt_token_ids=prompts, sampling_params=SamplingParams(max_tokens=4, temperature=0)
    )
    expected = asyncio.run(client.generate(request))

    async def parts_while_one_engine_is_held():
        first_taken = asyncio.Event()
        held = engines[1].generate

        async def held_until_a_part_was_taken(part_request):
            await first_taken.wait()
            return await held(part_request)

        engines[1].generate = held_until_a_part_was_taken
        taken = []
        async for indices, output in client.generate_parts(request):
            taken.append((indices, output))
            first_taken.set()
        return taken

    taken = asyncio.run(asyncio.wait_for(parts_while_one_engine_is_held(), timeout=60))
    assert len(taken) == 2 and sorted(i for indices, _ in taken for i in indices) == list(range(6))
    assert merge_parts(len(prompts), 1, taken) == expected
