"""Tests of engine actors on local Ray: two fp32 hf engines in a placement group behind `RayEngineProxy`, compared
with the same engine run in this process; the client over proxies; lifecycle calls; settings; teardown."""

import asyncio
import dataclasses
import importlib.util
import inspect

import pytest
import ray
import torch
from ray.util.placement_group import placement_group, remove_placement_group

from skyrl_train.config import SkyRLConfig
from skyrl_train.inference.base import InferenceEngine
from skyrl_train.inference.client import InferenceEngineClient, prefix_cache_metrics
from skyrl_train.inference.engine_builders import build_hf_engine, sglang_preflight
from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.ray_engine import (
    PASS_THROUGH,
    EngineActor,
    EngineSettings,
    RayEngineProxy,
    _forwarding,
    create_engine_actors,
)
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.loading import load_causal_lm, load_tokenizer
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer
from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.utils.registry import UnknownNameError
from skyrl_train.weight_sync import WeightChunk

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CFG = {"generator": {"inference_engine": {"backend": "hf", "model_dtype": "float32"}}, "trainer": {"device": "cpu"}}
GREEDY = SamplingParams(max_tokens=8, temperature=0)
LOGPROB_TOLERANCE = 1e-6  # same model, same code, same thread count: only the process differs


def _prompts(count=4):
    tokenizer = build_char_tokenizer()
    rendered = [
        tokenizer.apply_chat_template([{"role": "user", "content": f"{i}+{2 * i}="}], add_generation_prompt=True)
        for i in range(count)
    ]
    return [list(r["input_ids"] if hasattr(r, "keys") else r) for r in rendered]


def _local_engine(path):
    return HFInferenceEngine(load_causal_lm(path, dtype="float32"), load_tokenizer(path))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, save_varied_tiny_model):
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    path = save_varied_tiny_model(tmp_path_factory.mktemp("ray_engine") / "model")
    group = placement_group([{"CPU": 1}] * 2)
    ray.get(group.ready())
    engines = create_engine_actors(2, path, CFG, placement_group=group)
    yield {"path": path, "engines": engines, "group": group}
    for engine in engines:
        ray.kill(engine.handle)
    remove_placement_group(group)
    if started:
        ray.shutdown()


async def test_engine_actors_match_the_engine_in_this_process(cluster):
    prompts = _prompts()
    request = InferenceEngineInput(prompt_token_ids=prompts, sampling_params=GREEDY)
    expected = await _local_engine(cluster["path"]).generate(request)
    assert len({tuple(ids) for ids in expected.response_ids}) > 1  # the prompts lead to different answers
    for engine in cluster["engines"]:
        output = await engine.generate(request)
        assert output.response_ids == expected.response_ids and output.weight_version == 0
        for got, want in zip(output.response_logprobs, expected.response_logprobs):
            assert max(abs(a - b) for a, b in zip(got, want)) < LOGPROB_TOLERANCE


async def test_client_over_proxies_routes_like_a_client_over_local_engines(cluster):
    prompts = _prompts(6)
    request = InferenceEngineInput(
        prompt_token_ids=prompts, sampling_params=GREEDY, session_ids=[f"s{i}" for i in range(6)]
    )
    remote = await InferenceEngineClient(cluster["engines"]).generate(request)
    local_client = InferenceEngineClient([_local_engine(cluster["path"]) for _ in range(2)])
    local = await local_client.generate(request)
    assert remote.response_ids == local.response_ids and remote.stop_reasons == local.stop_reasons


async def test_a_conversations_second_turn_is_a_prefix_cache_hit_in_the_actor(cluster):
    """The session's turn 2 reuses turn 1's keys and values inside the engine actor, and the counts reach the trainer's
    metrics through the proxies (a call takes them: the next one starts from zero)."""
    engines, prompt = cluster["engines"], _prompts(1)[0]
    client = InferenceEngineClient(engines)
    await prefix_cache_metrics(engines)  # earlier tests' counts
    first = await client.generate(
        InferenceEngineInput(prompt_token_ids=[prompt], sampling_params=GREEDY, session_ids=["chat"])
    )
    follow = prompt + first.response_ids[0] + [5, 6, 7]
    await client.generate(InferenceEngineInput(prompt_token_ids=[follow], sampling_params=GREEDY, session_ids=["chat"]))
    metrics = await prefix_cache_metrics(engines)
    assert metrics["generate/prefix_cache_hit_rate"] == 0.5  # turn 1 found nothing, turn 2 its own conversation
    assert metrics["generate/prefix_cache_reused_tokens"] == len(prompt) + len(first.response_ids[0]) - 1
    assert metrics["generate/prefix_cache_prefilled_tokens"] == len(prompt) + 4  # turn 2: last token + 3 new
    assert "generate/prefix_cache_hit_rate" not in await prefix_cache_metrics(engines)


async def test_lifecycle_calls_and_weight_updates_reach_the_actor(cluster):
    engine = cluster["engines"][0]
    request = InferenceEngineInput(prompt_token_ids=_prompts(1), sampling_params=GREEDY)
    for hold, release in ((engine.pause, engine.resume), (lambda: engine.sleep(1), engine.wake_up)):
        await hold()
        held = asyncio.ensure_future(engine.generate(request))
        done, _ = await asyncio.wait([held], timeout=0.5)
        assert not done  # paused or asleep: the call waits in the actor
        await release()
        assert len((await held).response_ids) == 1

    name = "model.norm.weight"
    new_value = torch.linspace(0.5, 1.5, 128)
    version = await engine.fetch_weight_version() + 1
    await engine.init_weight_update()
    await engine.update_weights([(name, new_value)], version)
    assert engine.weight_version == version and await engine.fetch_weight_version() == version
    assert await engine.weights_checksum([name]) == {name: tensor_checksum(new_value)}
    await engine.reset_prefix_cache()
    assert (await engine.generate(request)).weight_version == version


async def test_generate_takes_the_local_channel_and_falls_back_to_ray_without_it(cluster):
    engine = cluster["engines"][0]
    request = InferenceEngineInput(prompt_token_ids=_prompts(2), sampling_params=GREEDY)
    through_channel = await engine.generate(request)
    loop = asyncio.get_running_loop()
    clients = engine._channels._clients  # the proxy's connection per calling event loop
    channel = clients[loop]
    assert engine._channel_state == "open" and channel._next_id == 1  # one request went through it

    # another thread's event loop (an HTTP endpoint's, say) calls the same proxy meanwhile: it gets a connection of
    # its own, and this loop's connection keeps serving
    elsewhere, here = await asyncio.gather(
        asyncio.to_thread(asyncio.run, engine.generate(request)), engine.generate(request)
    )
    assert elsewhere.response_ids == here.response_ids == through_channel.response_ids
    assert clients[loop] is channel and channel._next_id == 2 and channel.usable
    assert len(clients) == 2  # the other loop's stays until a new connection finds that loop closed

    # the socket is gone (as after the actor's channel failed): the call goes through Ray, with the same answer
    path = engine._channels.path
    channel.close()
    del clients[loop]
    engine._channels.path = path + ".gone"
    through_ray = await engine.generate(request)
    assert engine._channel_state == "ray" and clients[loop]._next_id == 0
    assert list(clients) == [loop]  # the closed loop's connection was dropped
    assert through_ray.response_ids == through_channel.response_ids
    engine._channel_state = "untried"  # the next call asks the actor again, which serves the same socket
    await engine.generate(request)
    assert engine._channels.path == path and engine._channels._clients[loop]._next_id == 1


async def test_receive_weights_needs_a_receiver(cluster):
    chunk = WeightChunk(version=99, index=0, final=True, names=["x"], shapes=[(1,)], dtype="float32")
    with pytest.raises(ray.exceptions.RayTaskError, match="call init_weight_receiver first"):
        await cluster["engines"][1].handle.receive_weights.remote(chunk)


def test_settings_come_from_config_and_bad_arguments_fail_before_starting_actors():
    settings = EngineSettings.from_config(CFG, "/models/m", num_threads=2)
    assert (settings.backend, settings.dtype, settings.device, settings.num_threads) == ("hf", "float32", "cpu", 2)
    assert settings.max_batch_size == 1024  # generator.inference_engine.max_num_seqs default
    with pytest.raises(ValueError, match="num_engines must be >= 1"):
        create_engine_actors(0, "/models/m", CFG)
    remote = {"generator": {"inference_engine": {"backend": "no_such_backend"}}, "trainer": {"device": "cpu"}}
    with pytest.raises(UnknownNameError, match="unknown engine backend 'no_such_backend'"):
        create_engine_actors(1, "/models/m", remote)
    vllm = EngineSettings.from_config({**CFG, "generator": {"inference_engine": {"backend": "vllm"}}}, "/models/m")
    assert (vllm.backend, vllm.enable_prefix_caching, vllm.tensor_parallel_size, vllm.seed) == ("vllm", True, 1, 42)


def test_vllm_tensor_parallelism_is_refused_before_any_actor_starts_where_it_cannot_run():
    engine = {"backend": "vllm", "tensor_parallel_size": 2}
    on_cpu = {"generator": {"inference_engine": engine}, "trainer": {"device": "cpu"}}
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 with backend=vllm on 'cpu' .* is not supported here"):
        create_engine_actors(1, "/models/m", on_cpu)
    on_cuda = {"generator": {"inference_engine": engine}, "trainer": {"device": "cuda"}}
    with pytest.raises(ValueError, match="runs its ranks as Ray workers in one-GPU bundles of a placement group"):
        create_engine_actors(1, "/models/m", on_cuda)  # no placement group to put the ranks in


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed here")
def test_sglang_is_refused_before_any_actor_starts_when_the_package_is_missing():
    sglang = {"generator": {"inference_engine": {"backend": "sglang"}}, "trainer": {"device": "cpu"}}
    with pytest.raises(ImportError, match=r"backend=sglang needs the sglang package.*no module named 'sglang'"):
        create_engine_actors(1, "/models/m", sglang)


def test_sglang_preflight_refuses_a_cpu_device(tmp_path, monkeypatch):
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")  # an importable stand-in: only the device check is left
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = EngineSettings(model_path="/models/m", backend="sglang", device="cpu")
    with pytest.raises(ValueError, match="backend=sglang runs on CUDA GPUs only; the engines' device is 'cpu'"):
        sglang_preflight(settings)
    sglang_preflight(EngineSettings(model_path="/models/m", backend="sglang", device="cuda"))


def test_forwarded_methods_carry_the_interface_signature_and_docstring():
    for cls, names in ((EngineActor, ("generate", *PASS_THROUGH)), (RayEngineProxy, PASS_THROUGH)):
        for name in names:
            method, interface = getattr(cls, name), getattr(InferenceEngine, name)
            assert inspect.iscoroutinefunction(method), (cls, name)
            assert inspect.signature(method) == inspect.signature(interface), (cls, name)
            assert method.__doc__ == interface.__doc__, (cls, name)
    assert RayEngineProxy.__abstractmethods__ == frozenset()
    with pytest.raises(TypeError, match="RayEngineProxy defines generate itself"):
        _forwarding(("generate",), to_actor=True)(RayEngineProxy)


async def test_teardown_ends_the_actor(cluster):  # last: it ends engine 1
    engine = cluster["engines"][1]
    await engine.teardown()
    with pytest.raises(ray.exceptions.RayActorError):
        await engine.handle.weight_version.remote()


@pytest.mark.parametrize(
    ("mode", "backend", "boundary", "in_flight"),
    [
        ("fully_async", "hf", "auto", True),
        ("fully_async", "hf", "token", True),
        ("fully_async", "hf", "turn", False),
        ("fully_async", "vllm", "auto", True),
        ("fully_async", "remote", "auto", False),
        ("fully_async", "remote", "token", True),
        ("one_step_off", "hf", "auto", True),
        ("one_step_off", "hf", "turn", False),
        ("sync", "hf", "auto", False),
    ],
)
def test_the_weight_update_boundary_reaches_the_hf_engine(tmp_path, mode, backend, boundary, in_flight):
    overrides = [f"trainer.mode={mode}", f"generator.inference_engine.backend={backend}", "trainer.device=cpu"]
    overrides += [f"trainer.async_rl.weight_update_boundary={boundary}"] if boundary != "auto" else []
    overrides += ["trainer.placement.colocate_all=false"] if mode != "sync" else []
    overrides += ["generator.inference_engine.remote_urls=[http://127.0.0.1:8000]"] if backend == "remote" else []
    settings = EngineSettings.from_config(SkyRLConfig.from_cli_overrides(overrides), "/models/m")
    assert settings.in_flight_weight_updates is in_flight
    if backend == "hf":
        build_tiny_model(TinyModelSpec(size=1), seed=0).save_pretrained(tmp_path)
        save_tokenizer(build_char_tokenizer(), tmp_path)
        engine = build_hf_engine(dataclasses.replace(settings, model_path=str(tmp_path), dtype="float32"))
        assert engine.in_flight_weight_updates is in_flight


def test_every_engine_key_reaches_the_engine_settings():
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "trainer.device=cpu",
            "trainer.seed=9",
            "generator.inference_engine.backend=vllm",
            "generator.inference_engine.model_dtype=float16",
            "generator.inference_engine.max_num_seqs=7",
            "generator.inference_engine.num_engines=2",
            "generator.inference_engine.gpu_memory_utilization=0.3",
            "generator.inference_engine.enable_prefix_caching=false",
            "generator.inference_engine.enforce_eager=true",
            "generator.inference_engine.engine_init_kwargs={max_logprobs: 3}",
            "trainer.placement.colocate_all=false",
            "trainer.policy.model.path=/models/m",
            "trainer.policy.model.lora.rank=8",
            "trainer.policy.model.lora.alpha=32",
        ]
    )
    settings = EngineSettings.from_config(cfg, "/models/m")
    assert (settings.lora_rank, settings.lora_alpha) == (8, 32.0)  # the engines take the policy's adapters
    remote = SkyRLConfig.from_cli_overrides(
        [
            "trainer.policy.model.path=/models/m",
            "generator.inference_engine.backend=remote",
            "generator.inference_engine.remote_urls=['http://a:8000','http://b:8000']",
            "generator.inference_engine.num_engines=2",
            "trainer.placement.colocate_all=false",
        ]
    )
    assert EngineSettings.from_config(remote, "/models/m").remote_urls == ("http://a:8000", "http://b:8000")
    assert (settings.backend, settings.dtype, settings.max_batch_size, settings.seed) == ("vllm", "float16", 7, 9)
    assert settings.gpu_memory_utilization == 0.3
    sglang = SkyRLConfig.from_cli_overrides(  # engine tensor parallelism: sglang only (vllm's actor has one GPU)
        [
            "trainer.policy.model.path=/models/m",
            "generator.inference_engine.backend=sglang",
            "generator.inference_engine.tensor_parallel_size=2",
            "trainer.placement.colocate_all=false",
        ]
    )
    assert EngineSettings.from_config(sglang, "/models/m").tensor_parallel_size == 2
    assert (settings.enable_prefix_caching, settings.enforce_eager) == (False, True)
    assert settings.engine_kwargs == {"max_logprobs": 3}


def test_hf_builder_takes_dtype_batch_size_and_engine_kwargs(tmp_path):
    build_tiny_model(TinyModelSpec(size=1), seed=0).save_pretrained(tmp_path)
    save_tokenizer(build_char_tokenizer(), tmp_path)
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "trainer.device=cpu",
            "generator.inference_engine.model_dtype=bfloat16",
            "generator.inference_engine.max_num_seqs=3",
            "generator.inference_engine.engine_init_kwargs={max_model_len: 48}",
        ]
    )
    engine = build_hf_engine(EngineSettings.from_config(cfg, str(tmp_path)))
    assert next(engine.model.parameters()).dtype == torch.bfloat16
    assert (engine.max_batch_size, engine.max_model_len) == (3, 48)
