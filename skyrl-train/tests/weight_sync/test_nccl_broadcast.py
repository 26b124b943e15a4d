"""The `broadcast` strategy over NCCL (GPU only, two GPUs): a sender actor on one GPU broadcasts another model's
weights into an engine actor on the other, chunk by chunk; the engine then generates what that model generates and
passes checksum verification. Its CPU twin (gloo, same code) is tests/weight_sync/test_strategies.py."""

import asyncio

import pytest
import ray
import torch

from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.ray_engine import create_engine_actors
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.loading import load_causal_lm, load_tokenizer
from skyrl_train.weight_sync import WeightSenderHost, connect_weight_sync

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.integration,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="an NCCL broadcast to a separate engine needs 2 GPUs"),
]

GREEDY = SamplingParams(max_tokens=10, temperature=0)


class GpuSender(WeightSenderHost):
    """A policy rank 0 stand-in on its own GPU, holding model B."""

    def __init__(self, model_path: str) -> None:
        self.model = load_causal_lm(model_path, dtype="float32", device="cuda")

    def push(self):
        """Send the model's state as the next version; the report the trainer's driver reads."""
        return self.weight_sender.send(self.model.state_dict().items()).report()


async def test_nccl_broadcast_into_an_engine_on_another_gpu(gpu_ray_cluster, tmp_path, save_varied_tiny_model):
    path_a, path_b = save_varied_tiny_model(tmp_path / "a", 0), save_varied_tiny_model(tmp_path / "b", 1)
    cfg = {
        "generator": {"inference_engine": {"backend": "hf", "model_dtype": "float32"}},
        "trainer": {"device": "cuda"},
    }
    engines = create_engine_actors(1, path_a, cfg, num_gpus_per_engine=1)
    sender = ray.remote(num_gpus=1)(GpuSender).remote(path_b)
    prompts = [[3, 20, 30, 40, 4, 3]]
    reference = HFInferenceEngine(load_causal_lm(path_b, device="cuda"), load_tokenizer(path_b))
    request = InferenceEngineInput(prompt_token_ids=prompts, sampling_params=GREEDY)
    expected = (await reference.generate(request)).response_ids
    strategy = await connect_weight_sync(
        "broadcast", sender, engines, colocated=False, device="cuda", chunk_bytes=64 * 1024, compute_checksums=True
    )
    try:
        report = await sender.push.remote()
        await strategy.confirm(report["version"], report["served_versions"])
        output = await engines[0].generate(request)
        assert output.response_ids == expected and output.weight_version == report["version"]
        assert (await strategy.verify(report["checksums"])).ok
    finally:
        await strategy.close()
        await asyncio.gather(*(engine.teardown() for engine in engines))
        ray.kill(sender)
