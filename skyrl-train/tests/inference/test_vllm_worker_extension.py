"""The `vllm serve` worker extension's checksum read-back, on stand-ins of a vLLM worker (no vLLM needed: the
extension only reads the worker's model and config)."""

from types import SimpleNamespace

import pytest
import torch

from skyrl_train.inference.vllm_weights import QWEN_PACKED_MODULES
from skyrl_train.inference.vllm_worker_extension import SkyRLWorkerExtension
from skyrl_train.utils.checksum import tensor_checksum


def _worker(tensor_parallel_size: int, vocab_size: int = 100) -> SkyRLWorkerExtension:
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(128, 4)  # vLLM's padded rows
    hf_config = SimpleNamespace(
        num_attention_heads=2, num_key_value_heads=1, hidden_size=4, intermediate_size=8, vocab_size=vocab_size
    )
    worker = SkyRLWorkerExtension()
    worker.model_runner = SimpleNamespace(model=_Named(model.embed.weight))
    worker.vllm_config = SimpleNamespace(
        parallel_config=SimpleNamespace(tensor_parallel_size=tensor_parallel_size),
        model_config=SimpleNamespace(hf_config=hf_config),
    )
    return worker


class _Named:
    """A served model holding only its embedding under the HF name."""

    packed_modules_mapping = QWEN_PACKED_MODULES

    def __init__(self, embedding: torch.Tensor) -> None:
        self.embedding = embedding

    def named_parameters(self):
        return [("model.embed_tokens.weight", self.embedding)]


def test_checksums_cover_the_trainer_rows_and_tensor_parallel_servers_are_refused():
    worker = _worker(tensor_parallel_size=1)
    expected = tensor_checksum(worker.model_runner.model.embedding.detach()[:100])
    assert worker.skyrl_weights_checksum() == {"model.embed_tokens.weight": expected}
    with pytest.raises(NotImplementedError, match="tensor_parallel_size=2 .*-tp 1"):
        _worker(tensor_parallel_size=2).skyrl_weights_checksum()
