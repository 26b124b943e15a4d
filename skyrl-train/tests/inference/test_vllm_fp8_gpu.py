"""vLLM's fp8 rollouts (`engine_init_kwargs.quantization=fp8`, FlashRL's `fp8_vllm`) on a CUDA GPU: weights quantized
at load and again at each weight sync. Not in `scripts/gpu_smoke.sh` (its one-GPU items fill the 10-minute budget):
run it on a GPU box with `pytest -m gpu skyrl-train/tests/inference/test_vllm_fp8_gpu.py` in `.venv-vllm`. Off CUDA
the engine refuses fp8 (`test_vllm_engine_gpu.py`)."""

import asyncio
import importlib.util

import pytest
import torch

from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.inference.vllm_engine import VLLMInferenceEngine

GREEDY = SamplingParams(max_tokens=8, temperature=0)


@pytest.mark.gpu
@pytest.mark.vllm
@pytest.mark.integration
@pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM's fp8 kernels need a CUDA GPU")
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_fp8_rollouts_requantize_the_weights_each_sync(tmp_path, old_and_new_model, is_greedy):
    """FlashRL's `fp8_vllm` (`engine_init_kwargs.quantization=fp8`): vLLM quantizes the weights when it loads them
    and again at each weight sync (its in-place reload re-runs the online quantization), so after a sync the engine
    follows the new model. e4m3 keeps 3 mantissa bits (each weight within 2^-4 of itself, per-tensor scale), which
    moves a tiny model's log-probs by a few hundredths: a token counts as greedy within 0.25 of the best."""
    tokenizer, old, new = old_and_new_model
    engine = VLLMInferenceEngine(
        str(tmp_path),
        dtype="bfloat16",
        device="cuda",
        gpu_memory_utilization=0.3,
        quantization="fp8",
        enforce_eager=True,
    )
    prompt = [list(tokenizer("12+34=")["input_ids"])]
    request = InferenceEngineInput(prompt_token_ids=prompt, sampling_params=GREEDY)

    async def scenario():
        before = (await engine.generate(request)).response_ids
        await engine.update_weights(new.state_dict().items(), version=1)
        return before, await engine.generate(request)

    try:
        before, after = asyncio.run(scenario())
    finally:
        asyncio.run(engine.teardown())
    assert after.weight_version == 1 and after.response_ids[0] != before[0]
    assert is_greedy(old, prompt[0], before[0], tolerance=0.25)
    assert is_greedy(new, prompt[0], after.response_ids[0], tolerance=0.25)
