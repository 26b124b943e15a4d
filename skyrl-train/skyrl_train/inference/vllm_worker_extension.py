"""A vLLM worker extension for `vllm serve` used as a `remote` engine: lets the trainer verify a weight sync.

    vllm serve MODEL --worker-extension-cls skyrl_train.inference.vllm_worker_extension.SkyRLWorkerExtension

adds the worker method `skyrl_weights_checksum`, which `POST /collective_rpc` (with `VLLM_SERVER_DEV_MODE=1`) calls:
per-parameter checksums of the served weights under Hugging Face names (fused q/k/v and gate/up sliced back into
their parts), the same numbers the in-process `vllm` engine reports. Parameters vLLM repacked into kernel layouts
cannot be read back and are left out.
"""

from __future__ import annotations

from skyrl_train.inference.vllm_weights import QWEN_PACKED_MODULES, fused_split_sizes, unfuse, unpad_vocab_rows
from skyrl_train.utils.checksum import tensor_checksum


class SkyRLWorkerExtension:
    """Mixed into vLLM's worker class by `--worker-extension-cls`."""

    def skyrl_weights_checksum(self) -> dict[str, float]:
        """Checksums of the served parameters by Hugging Face name; refused on a tensor-parallel server (each worker
        holds a shard, not the parameters the trainer sent)."""
        tp = int(self.vllm_config.parallel_config.tensor_parallel_size)
        if tp != 1:
            raise NotImplementedError(
                f"skyrl_weights_checksum reads whole parameters, but this server runs tensor_parallel_size={tp} (each "
                "worker holds a shard); verify weight syncs against a server started with -tp 1"
            )
        model = self.model_runner.model
        mapping = getattr(model, "packed_modules_mapping", None)
        packed = {fused: list(parts) for fused, parts in mapping.items()} if mapping else QWEN_PACKED_MODULES
        named = [(name, tensor.detach().cpu()) for name, tensor in model.named_parameters()]
        hf_config = self.vllm_config.model_config.hf_config
        served = unpad_vocab_rows(unfuse(named, packed, fused_split_sizes(hf_config)), hf_config.vocab_size)
        return {name: tensor_checksum(tensor) for name, tensor in served.items()}
