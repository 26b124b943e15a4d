"""The `cuda_ipc` strategy: on a GPU, the driver's CUDA model reaches a colocated engine actor by IPC handle; on any
machine, strategies refuse engines on the wrong device."""

import asyncio

import pytest
import torch

from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.ray_engine import create_engine_actors
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.loading import load_causal_lm, load_tokenizer
from skyrl_train.weight_sync import WeightSyncError, make_weight_sync_strategy
from skyrl_train.weight_sync.cuda_ipc import ipc_payload, share_per_consumer

GREEDY = SamplingParams(max_tokens=10, temperature=0)


@pytest.mark.parametrize("name, device", [("cuda_ipc", "cpu"), ("shm", "cuda")])
def test_colocated_strategies_refuse_engines_on_the_other_device(name, device):
    strategy = make_weight_sync_strategy(name)
    with pytest.raises(WeightSyncError, match=f"run on {device}"):
        strategy.build_init_infos({"device": device}, [{}])


@pytest.mark.gpu
@pytest.mark.integration
@pytest.mark.skipif(not torch.cuda.is_available(), reason="cuda_ipc needs a CUDA GPU")
async def test_cuda_ipc_sync_from_this_process_into_a_colocated_engine(
    gpu_ray_cluster, tmp_path, save_varied_tiny_model
):
    path_a, path_b = save_varied_tiny_model(tmp_path / "a", 0), save_varied_tiny_model(tmp_path / "b", 1)
    cfg = {"generator": {"inference_engine": {"backend": "hf", "model_dtype": "float32"}}}
    engines = create_engine_actors(1, path_a, {**cfg, "trainer": {"device": "cuda"}}, num_gpus_per_engine=0.5)
    prompts = [[3, 20, 30, 40, 4, 3]]
    reference = HFInferenceEngine(load_causal_lm(path_b, device="cuda"), load_tokenizer(path_b))
    request = InferenceEngineInput(prompt_token_ids=prompts, sampling_params=GREEDY)
    expected = (await reference.generate(request)).response_ids
    strategy = make_weight_sync_strategy("cuda_ipc", chunk_bytes=64 * 1024, compute_checksums=True)
    await strategy.init(None, engines)
    try:
        model_b = load_causal_lm(path_b, device="cuda")
        result = await strategy.sync(model_b.state_dict().items())
        assert result.num_chunks > 1
        output = await engines[0].generate(request)
        assert output.response_ids == expected and output.weight_version == result.version
        assert (await strategy.verify(result.checksums)).ok
    finally:
        await strategy.close()
        await asyncio.gather(*(engine.teardown() for engine in engines))


def test_every_consumer_of_a_chunk_gets_a_handle_of_its_own():
    """One `reduce_tensor` per consumer (an engine, or each tensor-parallel worker of one): torch counts the mappings of
    one handle in one slot, which two consumers would release below zero. CUDA IPC cannot run here: `reduce` is a
    stand-in numbering its calls."""
    calls = []

    def reduce(buffer):
        calls.append(buffer)
        return ("rebuild", ("args", len(calls)))

    buffer = torch.zeros(4, dtype=torch.uint8)
    shared = share_per_consumer(buffer, [1, 2], reduce)
    assert [[arguments[1] for _, arguments in handles] for handles in shared] == [[1], [2, 3]]
    assert all(seen is buffer for seen in calls)
    payload = ipc_payload(shared[1], "GPU-1")
    assert payload["arguments"] == ("args", 2) and len(payload["handles"]) == 2 and payload["device_uuid"] == "GPU-1"
