"""Sampling through vLLM (`skyrl-tx serve --sampler vllm`): the saved sampler weights of a training client are
served as vLLM LoRA adapters by name, next to the base model, by skyrl_train's `vllm` engine.

Training stays on the compute host (peft adapters, `LoraHost` or `RayLoraHost`); only `sample` moves, to this
process (`--compute local`) or to a Ray actor of its own (`--compute ray`, `skyrl_tx.ray_vllm_sampler`). A sampler
folder holds a peft adapter (`adapter_model.safetensors` + `adapter_config.json`), which is the format vLLM's LoRA
loader reads, so nothing is converted: each `<folder>@<adapter file mtime>` gets its own adapter id (weights saved
again under the same name load as a new adapter; the old one is dropped), and vLLM keeps the most recently used
`max_cpu_loras` loaded. Sampling params, seeds and stop rules are the same `SamplingParams` the `hf` sampler uses;
prompt logprobs are vLLM's (temperature 1, like the `hf` sampler's forward pass).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

from skyrl_tx.compute import ADAPTER_CONFIG, SampleJob, SampleResult, sampler_key, sampling_params_for
from skyrl_tx.wire import SampledRow, WireError

log = logging.getLogger(__name__)

HEAD_LORA_ARCHITECTURES = {"Qwen2ForCausalLM": "vllm.model_executor.models.qwen2"}
"""vLLM model classes that leave LoRA on `lm_head` out only because they do not declare it (vLLM's Qwen3 class
declares it and its LoRA layers handle it generically): this server serves them through a subclass that declares it,
checked against the `hf` sampler's logprobs by the tests. Tinker's default LoRA trains the unembedding."""


def _register_head_lora(architecture: str) -> None:
    """Make vLLM build `architecture` (one of HEAD_LORA_ARCHITECTURES) with LoRA on `lm_head` allowed."""
    import importlib

    from vllm import ModelRegistry

    base = getattr(importlib.import_module(HEAD_LORA_ARCHITECTURES[architecture]), architecture)
    if "lm_head" in (getattr(base, "embedding_modules", None) or {}):
        return
    declared = {"embed_tokens": "input_embeddings", "lm_head": "output_embeddings"}
    ModelRegistry.register_model(
        architecture, type(f"{architecture}WithHeadLoRA", (base,), {"embedding_modules": declared})
    )


def _lora_embedding_modules(worker: Any) -> list[str]:
    return sorted(getattr(worker.model_runner.model, "embedding_modules", None) or {})


class VLLMSampler:
    """The sampler of one base model on an in-process vLLM engine with LoRA enabled.

    Args:
        path: the base model's HF folder.
        max_context: the model's positions (prompt + response), as the compute host checks prompts against.
        device, dtype: where and in what dtype vLLM holds the base weights.
        max_lora_rank: the largest adapter rank served (vLLM reserves room for it; larger adapters are refused).
        max_loras: adapters one vLLM batch may mix (one per sampler call here, so small is enough).
        max_cpu_loras: adapters vLLM keeps loaded; older ones are dropped and reload on their next use.
        num_threads: CPU threads of vLLM (its `OMP_NUM_THREADS` when unset).
        gpu_memory_utilization: vLLM's share of the GPU (0.5 in the server process, where the host's base model
            shares the device; a Ray actor with a GPU of its own takes more).
    """

    def __init__(
        self,
        path: str,
        max_context: int,
        device: str = "cpu",
        dtype: str = "float32",
        max_lora_rank: int = 64,
        max_loras: int = 2,
        max_cpu_loras: int = 16,
        num_threads: int = 1,
        gpu_memory_utilization: float = 0.5,
    ) -> None:
        from skyrl_train.inference.vllm_engine import VLLMInferenceEngine
        from skyrl_train.inference.vllm_lora import vllm_max_lora_rank

        self.max_context = max_context
        self.architecture = str((json.loads((Path(path) / "config.json").read_text()).get("architectures") or ["?"])[0])
        if self.architecture in HEAD_LORA_ARCHITECTURES:
            _register_head_lora(self.architecture)
        self.max_lora_rank = max_lora_rank
        self.max_cpu_loras = max_cpu_loras
        self.engine = VLLMInferenceEngine(
            path,
            dtype=dtype,
            device=device,
            max_model_len=max_context,
            num_threads=num_threads,
            lora_rank=vllm_max_lora_rank(max_lora_rank),
            max_loras=max_loras,
            max_cpu_loras=max_cpu_loras,
            gpu_memory_utilization=gpu_memory_utilization,
        )
        self.head_lora = "lm_head" in self.engine.llm.collective_rpc(_lora_embedding_modules)[0]
        """Whether vLLM serves LoRA on `lm_head` for this model (adapters that train the unembedding need it)."""
        self.adapters: OrderedDict[str, int] = OrderedDict()
        """`<sampler folder>@<adapter file mtime>` -> vLLM adapter id, least recently used first."""
        self._next_id = 1

    def _adapter(self, directory: Optional[Path]) -> Any:
        """The vLLM LoRA request serving the sampler weights in `directory` (None: the base model)."""
        if directory is None:
            return None
        key = sampler_key(directory)
        if key in self.adapters:
            self.adapters.move_to_end(key)
            return self.engine.adapter_request(key, self.adapters[key], str(directory))
        config = json.loads((directory / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        rank = int(config["r"])
        if "lm_head" in (config.get("target_modules") or ()) and not self.head_lora:
            raise WireError(
                f"vLLM serves no LoRA on lm_head for {self.architecture}: these sampler weights train the unembedding; "
                "create the training client with train_unembed=False, or start the server with --sampler hf"
            )
        if rank > self.max_lora_rank:
            raise WireError(
                f"this server samples LoRA adapters of rank <= {self.max_lora_rank} (--vllm-max-lora-rank); "
                f"these sampler weights have rank {rank}"
            )
        for stale in [k for k in self.adapters if k.rsplit("@", 1)[0] == str(directory)]:
            self.engine.remove_adapter(self.adapters.pop(stale))
        self.adapters[key] = self._next_id
        self._next_id += 1
        while len(self.adapters) > self.max_cpu_loras:
            _, evicted = self.adapters.popitem(last=False)
            self.engine.remove_adapter(evicted)
        return self.engine.adapter_request(key, self.adapters[key], str(directory))

    def sample(self, sampler_dir: Optional[Path], jobs: list[SampleJob]) -> list[SampleResult]:
        """Run sampling jobs of one sampler (saved adapter weights, or the base model for None) in one vLLM batch."""
        from skyrl_train.inference.vllm_engine import VLLMRequest

        lora_request = self._adapter(sampler_dir)
        requests = []
        for job in jobs:
            wanted = job.topk_prompt_logprobs if job.prompt_logprobs or job.topk_prompt_logprobs else None
            requests.append(VLLMRequest(job.prompt, sampling_params_for(job, self.max_context), job.seed, wanted))
        results = []
        for generated in self.engine.generate_blocking(requests, lora_request):
            sequences = [
                SampledRow(tokens=list(ids), logprobs=list(logprobs), stop_reason=reason, topk=tops or None)
                for _, ids, logprobs, reason, tops in generated.rows
            ]
            result = SampleResult(sequences=sequences)
            if generated.prompt_logprobs is not None:
                result.prompt_logprobs, result.topk_prompt = generated.prompt_logprobs, generated.prompt_top_logprobs
            results.append(result)
        return results

    def close(self) -> None:
        """Release vLLM."""
        try:
            asyncio.run(self.engine.teardown())
        except Exception:  # shutting down: a failed teardown must not hide why the server stops
            log.exception("vLLM sampler teardown failed")
