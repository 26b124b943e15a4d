"""A vllm engine with tensor_parallel_size=2, started the way training starts it (`create_engine_actors` in a placement
group of one-GPU bundles, its ranks as Ray workers of vLLM's Ray executor), serves greedy continuations of the model
it loaded and, after a weight update, of the new weights: so each rank loaded its shard of every updated tensor.

Needs 2 CUDA GPUs and vLLM's CUDA build; `scripts/gpu_smoke.sh --gpus 2 --tp 2` runs it (item `vllm_tp2`). The
placement arithmetic and the settings vLLM reads are checked on CPU (`tests/test_placement.py`,
`test_vllm_engine_gpu.py`)."""

import asyncio
import importlib.util

import pytest
import torch

from skyrl_train.inference.types import InferenceEngineInput, SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.vllm,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="vLLM tensor parallelism 2 needs 2 CUDA GPUs"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]

GREEDY = SamplingParams(max_tokens=8, temperature=0)


def test_a_tensor_parallel_engine_serves_the_weights_each_rank_loaded(
    tmp_path, ray_cluster, old_and_new_model, is_greedy
):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from skyrl_train.inference.ray_engine import create_engine_actors

    tokenizer, old, new = old_and_new_model
    cfg = {
        "trainer": {"device": "cuda"},
        "generator": {
            "inference_engine": {
                "backend": "vllm",
                "tensor_parallel_size": 2,
                "model_dtype": "float32",
                "gpu_memory_utilization": 0.3,
                "enforce_eager": True,
            }
        },
    }
    group = placement_group([{"CPU": 1, "GPU": 1}, {"CPU": 1, "GPU": 1}], strategy="STRICT_PACK")
    ray.get(group.ready(), timeout=120)
    (engine,) = create_engine_actors(1, str(tmp_path), cfg, placement_group=group)
    prompt = list(tokenizer("12+34=")["input_ids"])
    request = InferenceEngineInput(prompt_token_ids=[prompt], sampling_params=GREEDY)

    async def scenario():
        before = (await engine.generate(request)).response_ids[0]
        await engine.update_weights(list(new.state_dict().items()), version=1)
        after = await engine.generate(request)
        return before, after

    try:
        before, after = asyncio.run(scenario())
    finally:
        asyncio.run(engine.teardown())
        remove_placement_group(group)
    assert after.weight_version == 1
    assert is_greedy(old, prompt, before) and is_greedy(new, prompt, after.response_ids[0])
