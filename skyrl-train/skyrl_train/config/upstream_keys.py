"""The keys and values of NovaSky-AI/SkyRL's config (both its layouts) and what each one is in this project.

Upstream SkyRL has two config layouts: the legacy one (Hydra YAML, `python -m skyrl_train.entrypoints.main_base`,
flat generator keys such as `generator.backend`) and the current one (dataclasses, `python -m
skyrl.train.entrypoints.main_base`, nested keys such as `generator.inference_engine.run_engines_locally`). Every key
of either layout that this project does not spell the same way has one rule in `RULES` (a rule on a section covers
the keys under it that have no rule of their own):

- `Rename`: the key is this project's `target` key(s), or for a section, the section `target`; `values` maps upstream
  values spelled differently (`NOTHING`: the value sets nothing here), `implies` adds what the key switches on.
- `Fixed`: the key selects behaviour this project always has at the `accepted` values (accepted and dropped:
  nothing stores them); any other value asks for `feature`, refused as not supported here.
- `Ignored`: a setting of a feature whose on-switch is refused here (profiler ranks, MTP loss weight, ...): upstream
  ignores it while the feature is off, and so does this project.
- `Remote`: part of upstream's "engines run elsewhere" switch, translated as a whole (`upstream.py`).

`VALUE_RULES` does the same for upstream values of keys spelled alike (`trainer.strategy=fsdp`,
`trainer.resume_mode=null`, ...), and `UPSTREAM_NAMES` names upstream registry entries this project lacks, so an
unregistered `dppo` loss is refused as SkyRL's DPPO instead of as a typo. `docs/migrating-from-skyrl.md` is the
user-facing list.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Optional

NOTHING: Any = type("Nothing", (), {"__repr__": lambda self: "NOTHING"})()
"""A mapped value that sets nothing here (e.g. `use_tis=false`: the off-policy keys decide)."""


@dataclass(frozen=True)
class Rename:
    """An upstream key that is `target` here (a tuple: several keys here, e.g. one per role)."""

    target: str | tuple[str, ...]
    values: tuple[tuple[Any, Any], ...] = ()
    """`(upstream value, value here)` pairs for values spelled differently."""
    implies: tuple[tuple[str, Any], ...] = ()
    """Further `(key, value)` settings the upstream key means (e.g. `enabled=true` for a DAPO buffer length)."""

    @property
    def targets(self) -> tuple[str, ...]:
        """The target keys as a tuple."""
        return (self.target,) if isinstance(self.target, str) else self.target


@dataclass(frozen=True)
class Fixed:
    """An upstream key whose `accepted` values describe what this project always does; any other value asks for
    `feature`, which is not supported here."""

    accepted: tuple[Any, ...]
    feature: str
    """What other values ask for, named in the refusal."""
    means: str
    """What the accepted values are here (shown by `--dry-run`)."""
    instead: str = ""
    """What does that job here, if anything."""


@dataclass(frozen=True)
class Ignored:
    """A setting of `feature`, which is off here (its switch, `switch`, is refused unless off): ignored as upstream
    ignores it while the feature is off."""

    feature: str
    switch: str


@dataclass(frozen=True)
class Checked:
    """An upstream key whose value is checked against the built config: `feature(cfg, value)` is None when the value
    describes what this project does there, else the feature the value asks for (refused)."""

    feature: Callable[[Any, Any], Optional[str]]
    means: str


@dataclass(frozen=True)
class Remote:
    """One part of upstream's switch to inference servers started elsewhere."""

    part: Literal["locally", "urls", "proxy"]


@dataclass(frozen=True)
class Replace:
    """An upstream value of a key spelled alike, spelled `value` here."""

    value: Any
    note: str = ""


@dataclass(frozen=True)
class Refuse:
    """An upstream value of a key spelled alike that asks for a feature not supported here."""

    feature: str
    instead: str = ""


Rule = Rename | Fixed | Ignored | Checked | Remote


def _policy_model(cfg: Any, name: Any) -> Optional[str]:
    """SkyRL's legacy `generator.model_name` defaults to the policy's model path, which the engines serve here."""
    if name in ("${trainer.policy.model.path}", cfg.trainer.policy.model.path):
        return None
    return "engines serving another model than the policy"


def _generation_workers(cfg: Any, workers: Any) -> Optional[str]:
    """Upstream's fully-async generation workers each run one group; this project keeps as many groups in flight as
    the staleness bound admits (`train_batch_size * (max_staleness + 1)`), which a smaller worker count would cap."""
    capacity = cfg.trainer.train_batch_size * (cfg.trainer.async_rl.max_staleness + 1)
    if cfg.trainer.mode != "fully_async" or not isinstance(workers, int) or workers >= capacity:
        return None
    return f"capping concurrent generation below the staleness bound ({capacity} groups)"


_OFF = (False,)
_NONE = (None,)
_ROLES = ("policy", "ref", "critic")
_MODEL_ROLES = ("policy", "ref")
_ENGINE = "generator.inference_engine"
_PROFILER = "the torch profiler"
_MTP = "multi-token-prediction (MTP) heads and speculative decoding"
_MEGATRON_LORA = "LoRA on the Megatron strategy"
_FLAT_ENGINE_KEYS = (
    "backend",
    "model_dtype",
    "gpu_memory_utilization",
    "weight_sync_backend",
    "enforce_eager",
    "enable_prefix_caching",
    "max_num_seqs",
    "engine_init_kwargs",
    "run_engines_locally",
    "weight_transfer_threshold_cuda_ipc_GB",
    "vllm_v1_disable_multiproc",
    "enable_chunked_prefill",
    "max_num_batched_tokens",
    "fully_sharded_loras",
    "enable_ray_prometheus_stats",
    "external_proxy_url",
    "external_server_urls",
)


def _role_rules(role: str) -> dict[str, Rule]:
    """Rules for the keys of one role section (`trainer.policy`, `trainer.ref`, `trainer.critic`)."""
    prefix = f"trainer.{role}"
    precision = f"{prefix}.fsdp_config.mixed_precision"
    dtypes = (("bf16", "bfloat16"), ("fp32", "float32"), ("fp16", "float16"))
    rules: dict[str, Rule] = {
        f"{prefix}.fsdp_config": Rename(f"{prefix}.fsdp"),
        precision: Rename(f"{prefix}.fsdp.mixed_precision", values=((None, NOTHING),)),
        f"{precision}.param_dtype": Rename(f"{prefix}.fsdp.mixed_precision.param_dtype", values=dtypes),
        f"{precision}.reduce_dtype": Rename(f"{prefix}.fsdp.mixed_precision.reduce_dtype", values=dtypes),
        f"{precision}.buffer_dtype": Fixed(("fp32",), "other FSDP buffer dtypes", "buffers stay in float32"),
        f"{prefix}.fsdp_config.wrap_policy": Fixed(
            ({},),
            "custom FSDP wrap policies",
            "each decoder layer is its own FSDP unit",
            f"{prefix}.fsdp.shard_layers=false shards the whole model as one unit",
        ),
        f"{prefix}.model_config_kwargs": Fixed(
            ({},),
            "overriding the Hugging Face model config at load time",
            "the model's own config",
            "save a model folder whose config.json has the values you want",
        ),
        f"{prefix}.language_model_only": Fixed(
            (False, True), "", "models load as causal language models (no vision encoder) either way"
        ),
        f"{prefix}.model.fake_int4_qat": Ignored(
            "INT4 quantization-aware training", f"{prefix}.model.fake_int4_qat.enabled"
        ),
        f"{prefix}.model.fake_int4_qat.enabled": Fixed(_OFF, "INT4 quantization-aware training", "off"),
        f"{prefix}.model.lora.lora_sync_path": Fixed(
            ("/tmp/skyrl_lora_sync",),
            "choosing the LoRA sync folder",
            "adapters reach the engines through folders this project manages",
        ),
        f"{prefix}.model.lora.init_method": Fixed(
            ("kaiming",), "LoRA initialisations other than kaiming", "PEFT's default: Kaiming-uniform A, zero B"
        ),
        f"{prefix}.model.lora.max_loras": Fixed(
            (1,), "serving several LoRA adapters at once from the trainer's engines", "one adapter"
        ),
        f"{prefix}.model.lora.max_cpu_loras": Fixed(_NONE, "sizing vLLM's CPU LoRA cache", "vLLM's default"),
    }
    if role in _MODEL_ROLES:
        rules.update(_megatron_rules(role))
    if role != "ref":
        rules[f"{prefix}.optimizer_config"] = Rename(f"{prefix}.optimizer")
    if role == "policy":
        rules.update(
            {
                f"{prefix}.use_torch_compile": Fixed(_OFF, "torch.compile of the logits computation", "eager"),
                f"{prefix}.record_memory": Fixed(_OFF, "CUDA memory snapshots", "off"),
                f"{prefix}.torch_profiler_config": Ignored(_PROFILER, f"{prefix}.torch_profiler_config.enable"),
                f"{prefix}.torch_profiler_config.enable": Fixed(_OFF, _PROFILER, "off"),
                f"{prefix}.inference_only_init": Fixed(_OFF, "inference-only policy workers", "the policy trains"),
            }
        )
    return rules


def _megatron_rules(role: str) -> dict[str, Rule]:
    """Rules for `trainer.<role>.megatron_config.*`: the parallel sizes are this project's `megatron` section."""
    prefix = f"trainer.{role}.megatron_config"
    off_features = {
        "moe_enable_routing_replay": "routed-expert replay (R3)",
        "moe_per_layer_logging": "per-layer MoE logging",
        "freeze_moe_router": "freezing the MoE router",
        "dist_ckpt_optim_fully_reshardable": "fully reshardable distributed optimizer checkpoints",
        "async_dist_ckpt_save": "asynchronous distributed checkpoint saves",
        "async_save_prestage_to_cpu": "asynchronous distributed checkpoint saves",
    }
    mtp_switch = f"{prefix}.mtp_num_layers"
    optimizer_kwargs = f"{prefix}.optimizer_config_kwargs"
    transformer_kwargs = f"{prefix}.transformer_config_kwargs"
    return {
        prefix: Rename(f"trainer.{role}.megatron"),
        **{f"{prefix}.{name}": Fixed(_OFF, feature, "off") for name, feature in off_features.items()},
        f"{prefix}.expert_tensor_parallel_size": Fixed(
            (None, 1), "expert tensor parallelism (ETP)", "experts are not split across tensor-parallel ranks"
        ),
        f"{prefix}.moe_token_dispatcher_type": Fixed(("alltoall",), "other MoE token dispatchers", "all-to-all"),
        f"{prefix}.moe_router_load_balancing_type": Fixed(
            ("none",), "MoE load-balancing losses", "no load-balancing loss"
        ),
        f"{prefix}.moe_aux_loss_coeff": Fixed((0.0,), "MoE auxiliary losses", "no auxiliary loss"),
        f"{prefix}.moe_grouped_gemm": Fixed(
            (True, False), "", "experts run as separate GEMMs either way (same results, no grouped-GEMM kernel)"
        ),
        f"{prefix}.moe_router_score_function": Fixed(
            _NONE, "overriding the MoE router's score function", "the model config's score function"
        ),
        f"{prefix}.moe_router_enable_expert_bias": Fixed(
            _NONE, "overriding the MoE router's expert bias", "the model config's setting"
        ),
        f"{prefix}.moe_router_dtype": Fixed(("fp32",), "other MoE router dtypes", "fp32 routing"),
        f"{prefix}.ddp_config": Fixed((), "other Megatron DDP settings", ""),
        f"{prefix}.ddp_config.grad_reduce_in_fp32": Fixed((True,), "reducing gradients in bf16", "fp32 reduction"),
        f"{prefix}.ddp_config.overlap_grad_reduce": Fixed(_OFF, "overlapping the gradient reduction", "off"),
        f"{prefix}.ddp_config.overlap_param_gather": Fixed(_OFF, "overlapping the parameter gather", "off"),
        f"{prefix}.ddp_config.average_in_collective": Fixed(
            (True, False), "", "gradients are averaged over the data-parallel ranks either way"
        ),
        f"{prefix}.hf_export_config": Ignored(
            "distributed Megatron HF exports", f"{prefix}.hf_export_config.distributed_save"
        ),
        f"{prefix}.hf_export_config.distributed_save": Fixed(
            _OFF, "distributed Megatron HF exports", "one rank writes the export"
        ),
        f"{prefix}.lora_config": Ignored(
            _MEGATRON_LORA, f"trainer.{role}.model.lora.rank > 0 with trainer.strategy=megatron"
        ),
        optimizer_kwargs: Fixed(
            ({},), "megatron-core optimizer pass-through settings", "the distributed optimizer with its defaults"
        ),
        **{
            f"{optimizer_kwargs}.{name}": Rename(f"trainer.{role}.megatron.{name}")
            for name in (
                "overlap_cpu_optimizer_d2h_h2d",
                "use_precision_aware_optimizer",
                "optimizer_cpu_offload",
                "optimizer_offload_fraction",
            )
        },
        transformer_kwargs: Fixed(
            ({},), "megatron-core TransformerConfig pass-through settings", "the model's own config"
        ),
        **{
            f"{transformer_kwargs}.{name}": Fixed(
                accepted,
                "other activation recompute settings",
                "with gradient checkpointing on (`auto` by default: on CUDA when a shard's activations need it) the"
                " workers recompute every layer in full, uniformly, one layer at a time",
                "trainer.policy.gradient_checkpointing=false turns recompute off",
            )
            for name, accepted in (
                ("recompute_granularity", ("full",)),
                ("recompute_method", ("uniform",)),
                ("recompute_num_layers", (1,)),
                ("recompute_modules", (["core_attn"],)),
            )
        },
        f"{transformer_kwargs}.gradient_accumulation_fusion": Fixed(
            _OFF, "fused gradient accumulation (needs Transformer Engine)", "off"
        ),
        f"{transformer_kwargs}.num_layers_in_last_pipeline_stage": Fixed(
            _NONE, "uneven pipeline stages", "even stages (pipeline parallelism itself is not supported yet)"
        ),
        **{
            f"{transformer_kwargs}.{name}": Rename(f"{prefix}.{name}")
            for name in (
                "moe_token_dispatcher_type",
                "moe_router_load_balancing_type",
                "moe_aux_loss_coeff",
                "moe_grouped_gemm",
                "moe_router_score_function",
                "moe_router_enable_expert_bias",
                "moe_router_dtype",
            )
        },
        f"{prefix}.model_config_kwargs": Fixed(({},), "overriding the model config for Megatron", "the model's own"),
        f"{prefix}.empty_cuda_cache": Fixed(
            (None, True, False), "", "no manual CUDA cache flush either way (memory handling only; same results)"
        ),
        f"{prefix}.torch_profiler_config": Ignored(_PROFILER, f"{prefix}.torch_profiler_config.enable"),
        f"{prefix}.torch_profiler_config.enable": Fixed(_OFF, _PROFILER, "off"),
        f"{prefix}.mtp_num_layers": Fixed(_NONE, _MTP, "none"),
        f"{prefix}.mtp_loss_weight": Ignored(_MTP, mtp_switch),
        f"{prefix}.mtp_loss_chunk_size": Ignored(_MTP, mtp_switch),
        f"{prefix}.mtp_loss_topk": Ignored(_MTP, mtp_switch),
        f"{prefix}.async_dist_ckpt_strategy": Ignored(
            "asynchronous distributed checkpoint saves", f"{prefix}.async_dist_ckpt_save"
        ),
    }


RULES: dict[str, Rule] = {
    # ----- data
    "data.dataloader.num_workers": Rename("data.num_workers", values=((None, 0),)),
    "data.dataloader.persistent_workers": Fixed(_OFF, "persistent data-loader workers", "prompts load in the driver"),
    # ----- trainer scalars
    "trainer.max_prompt_length": Rename("data.max_prompt_length"),
    "trainer.gradient_checkpointing": Rename(
        ("trainer.policy.gradient_checkpointing", "trainer.critic.gradient_checkpointing")
    ),
    "trainer.gradient_checkpointing_use_reentrant": Fixed(_OFF, "reentrant activation checkpointing", "non-reentrant"),
    "trainer.sequence_parallel_backend": Fixed(
        ("ulysses",), "other sequence-parallel backends", "names Ulysses (sequence_parallel_size > 1 is refused)"
    ),
    "trainer.bf16": Rename(
        tuple(f"trainer.{role}.fsdp.mixed_precision.param_dtype" for role in _ROLES)
        + tuple(f"trainer.{role}.megatron.param_dtype" for role in _MODEL_ROLES),
        values=((True, NOTHING), (False, "float32")),
    ),
    "trainer.use_expandable_segments": Fixed(
        _OFF,
        "setting the CUDA allocator of the training workers",
        "the allocator the environment sets",
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before starting the run",
    ),
    "trainer.flash_attn": Fixed(
        (True, False), "", "attention runs through PyTorch SDPA, which uses flash-attention kernels on CUDA"
    ),
    "trainer.disable_fast_tokenizer": Fixed(_OFF, "slow (Python) tokenizers", "the fast tokenizer"),
    "trainer.update_ref_every_epoch": Fixed(_OFF, "re-syncing the reference model every epoch", "a frozen reference"),
    "trainer.recompute_old_logprobs_per_minibatch": Fixed(
        (True,), "one full-batch forward for the old log-probs", "old log-probs follow the training mini-batches"
    ),
    "trainer.use_sample_packing": Rename("trainer.remove_microbatch_padding"),
    "trainer.dump_eval_results": Fixed(
        (True,), "turning evaluation dumps off", "evaluation results are written under trainer.export_path"
    ),
    "trainer.enable_ray_gpu_monitor": Fixed(_OFF, "the background Ray GPU monitor", "off"),
    "trainer.tags": Fixed(_NONE, "run tags in the tracking backends", "no tags"),
    "trainer.print_example_interval": Fixed((0, -1), "printing an example rollout every N steps", "off"),
    "trainer.log_example_interval": Fixed((0, -1), "logging an example prompt every N steps", "off"),
    "trainer.num_logger_eval_samples": Fixed((0, -1), "uploading evaluation samples to the tracker", "off"),
    "trainer.num_logger_train_samples": Fixed((0, -1), "uploading training samples to the tracker", "off"),
    "trainer.logprobs_chunk_size": Fixed(
        (1024, None), "choosing the log-prob chunk size", "log-probs are computed per micro-batch (same values)"
    ),
    "trainer.vocab_entropy_chunk_size": Fixed((0,), "chunked vocabulary entropy", "unchunked"),
    "trainer.vocab_entropy_chunk_memory_mb": Fixed((512,), "chunked vocabulary entropy", "unchunked"),
    "trainer.fused_lm_head_logprob": Fixed(_OFF, "the fused LM-head log-prob kernel", "off"),
    "trainer.fused_lm_head_logprob_backend": Ignored(
        "the fused LM-head log-prob kernel", "trainer.fused_lm_head_logprob"
    ),
    "trainer.rope_scaling": Fixed(_NONE, "RoPE overrides", "the model's own RoPE"),
    "trainer.rope_theta": Fixed(_NONE, "RoPE overrides", "the model's own RoPE"),
    "trainer.mtp": Ignored(_MTP, "trainer.mtp.enabled"),
    "trainer.mtp.enabled": Fixed(_OFF, _MTP, "off"),
    "trainer.fully_async.enabled": Rename("trainer.mode", values=((True, "fully_async"), (False, NOTHING))),
    "trainer.fully_async.max_staleness_steps": Rename("trainer.async_rl.max_staleness"),
    "trainer.fully_async.num_parallel_generation_workers": Checked(
        _generation_workers, "as many groups in flight as the staleness bound admits"
    ),
    "trainer.fully_async.sample_full_batch": Fixed(_OFF, "sampling whole batches in fully_async mode", "off"),
    "trainer.fully_async.clear_kv_cache_on_weight_sync": Fixed(
        _OFF, "clearing the KV cache of running requests at a weight sync", "running requests keep their context"
    ),
    "trainer.fully_async.simulate_training": Fixed(_OFF, "simulated training (a generation benchmark)", "off"),
    "trainer.fully_async.simulate_training_step_seconds": Ignored(
        "simulated training", "trainer.fully_async.simulate_training"
    ),
    "trainer.fully_async.simulate_weight_sync_seconds": Ignored(
        "simulated training", "trainer.fully_async.simulate_training"
    ),
    # ----- algorithm
    "trainer.algorithm.temperature": Fixed(
        _NONE,
        "a training temperature other than the sampling one",
        "the sampling temperature",
        "log-probs always use generator.sampling_params.temperature",
    ),
    "trainer.algorithm.value_head_prefix": Fixed(("value_head",), "renaming the critic's value head", "value_head"),
    "trainer.algorithm.zero_variance_filter": Fixed(
        _OFF,
        "loss-masking zero-variance groups",
        "off",
        "trainer.algorithm.dynamic_sampling.type=filter drops those groups instead",
    ),
    "trainer.algorithm.zero_variance_filter_tol": Ignored(
        "loss-masking zero-variance groups", "trainer.algorithm.zero_variance_filter"
    ),
    "trainer.algorithm.use_tis": Rename(
        "trainer.algorithm.off_policy_correction.tis_ratio_type", values=((True, "token"), (False, NOTHING))
    ),
    "trainer.algorithm.tis_imp_ratio_cap": Rename(
        "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high", values=((-1.0, NOTHING),)
    ),
    **{
        f"trainer.algorithm.off_policy_correction.{name}_{end}": Fixed(_NONE, feature, "off")
        for name, feature in (
            ("outlier_token_is_threshold", "masking sequences that hold outlier token ratios"),
            ("token_mask_is_threshold", "masking tokens by their importance ratio"),
        )
        for end in ("low", "high")
    },
    "trainer.algorithm.cispo.cispo_eps_clip_low": Rename("trainer.algorithm.cispo.eps_clip_low"),
    "trainer.algorithm.cispo.cispo_eps_clip_high": Rename("trainer.algorithm.cispo.eps_clip_high"),
    "trainer.algorithm.cispo.cispo_anchor": Rename("trainer.algorithm.cispo.anchor"),
    "trainer.algorithm.kl_cov.ppo_kl_coef": Rename("trainer.algorithm.kl_cov.kl_cov_coef"),
    "trainer.algorithm.dppo": Ignored("the DPPO policy loss", "trainer.algorithm.policy_loss_type=dppo"),
    "trainer.algorithm.overlong_buffer.len": Rename(
        "trainer.algorithm.overlong_buffer.length", implies=(("trainer.algorithm.overlong_buffer.enabled", True),)
    ),
    "trainer.algorithm.overlong_buffer_len": Rename(
        "trainer.algorithm.overlong_buffer.length", implies=(("trainer.algorithm.overlong_buffer.enabled", True),)
    ),
    "trainer.algorithm.overlong_buffer_penalty_factor": Rename("trainer.algorithm.overlong_buffer.penalty_factor"),
    # ----- legacy flat generator keys
    "generator.num_inference_engines": Rename(f"{_ENGINE}.num_engines"),
    **{
        f"generator.inference_engine_{kind}_parallel_size": Rename(f"{_ENGINE}.{kind}_parallel_size")
        for kind in ("tensor", "pipeline", "expert", "data")
    },
    **{f"generator.{name}": Rename(f"{_ENGINE}.{name}") for name in _FLAT_ENGINE_KEYS},
    "generator.model_name": Checked(_policy_model, "the engines serve the policy's model"),
    "generator.async_engine": Fixed(
        (True, False), "", "engines are asynchronous either way (SkyRL's synchronous engine samples the same)"
    ),
    f"{_ENGINE}.async_engine": Fixed(
        (True, False), "", "engines are asynchronous either way (SkyRL's synchronous engine samples the same)"
    ),
    "generator.remote_inference_engine_urls": Remote("urls"),
    "generator.enable_http_endpoint": Rename("generator.http_endpoint.enabled"),
    "generator.http_endpoint_host": Rename("generator.http_endpoint.host"),
    "generator.http_endpoint_port": Rename("generator.http_endpoint.port"),
    "generator.served_model_name": Rename("generator.http_endpoint.served_model_name"),
    "generator.override_existing_update_group": Fixed(
        ("auto", "enable", "disable"), "", "weight-sync groups are set up once per run either way"
    ),
    "generator.rope_scaling": Fixed((None, "${trainer.rope_scaling}"), "RoPE overrides", "the model's own RoPE"),
    "generator.rope_theta": Fixed((None, "${trainer.rope_theta}"), "RoPE overrides", "the model's own RoPE"),
    "generator.retokenize_chat_history": Fixed(
        _OFF, "re-tokenizing the chat history each turn", "token-in/token-out: the model's own tokens are kept"
    ),
    # ----- generator (current layout)
    "generator.append_eos_token_after_stop_str_in_multi_turn": Fixed(
        (True,),
        "continuing a turn without an eos after a stop string",
        "a turn that ends on a stop string is closed with the eos token",
    ),
    "generator.use_cache_salt": Fixed(_OFF, "salting the prefix cache with the weight version", "off"),
    "generator.vision_language_generator": Fixed(_OFF, "vision-language (VLM) rollouts", "text only"),
    "generator.merge_stepwise_output": Fixed(_OFF, "merging step-wise samples back into trajectories", "off"),
    "generator.rate_limit": Ignored("rate-limiting trajectories", "generator.rate_limit.enabled"),
    "generator.rate_limit.enabled": Fixed(_OFF, "rate-limiting trajectories", "off"),
    f"{_ENGINE}.run_engines_locally": Remote("locally"),
    f"{_ENGINE}.external_server_urls": Remote("urls"),
    f"{_ENGINE}.external_proxy_url": Remote("proxy"),
    f"{_ENGINE}.pipeline_parallel_size": Fixed((1,), "pipeline parallelism inside an inference engine", "none"),
    f"{_ENGINE}.expert_parallel_size": Fixed((1,), "expert parallelism inside an inference engine", "none"),
    f"{_ENGINE}.data_parallel_size": Fixed(
        (1,),
        "data parallelism inside one inference engine",
        "one replica per engine",
        f"{_ENGINE}.num_engines adds replicas",
    ),
    f"{_ENGINE}.weight_transfer_threshold_cuda_ipc_GB": Fixed(
        (1.0,), "choosing the CUDA-IPC bucket size", "weights go in the strategies' fixed-size chunks"
    ),
    f"{_ENGINE}.delta_weight_sync.checkpoint_load_format": Fixed(
        ("vllm_multi_thread_safetensors", "vllm_fastsafetensors"),
        "",
        "each engine installs the patched weights from its local copy itself (no vLLM checkpoint reload)",
    ),
    f"{_ENGINE}.delta_weight_sync.multi_thread_safetensors_max_workers": Fixed(
        (8,), "choosing vLLM's checkpoint reload threads", "no vLLM checkpoint reload"
    ),
    f"{_ENGINE}.vllm_v1_disable_multiproc": Fixed(
        (True, False), "", "inert, as upstream documents it: the engine actor runs vLLM either way"
    ),
    f"{_ENGINE}.enable_chunked_prefill": Fixed(
        (True,),
        "turning off chunked prefill through this key",
        "vLLM's default (chunked prefill on)",
        f"{_ENGINE}.engine_init_kwargs.enable_chunked_prefill=false (vllm backend)",
    ),
    f"{_ENGINE}.max_num_batched_tokens": Fixed(
        (8192,),
        "setting vLLM's batched-token budget through this key",
        "vLLM's default budget",
        f"{_ENGINE}.engine_init_kwargs.max_num_batched_tokens=N (vllm backend)",
    ),
    f"{_ENGINE}.fully_sharded_loras": Fixed(
        _OFF,
        "turning on vLLM's fully sharded LoRA kernels through this key",
        "off",
        f"{_ENGINE}.engine_init_kwargs.fully_sharded_loras=true (vllm backend)",
    ),
    f"{_ENGINE}.enable_return_routed_experts": Fixed(_OFF, "routed-expert replay (R3)", "off"),
    f"{_ENGINE}.enable_ray_prometheus_stats": Fixed(_OFF, "the Ray Prometheus stats logger in the engines", "off"),
    f"{_ENGINE}.offload_kv_for_weight_sync": Fixed(_OFF, "offloading the KV cache during a weight sync", "off"),
    f"{_ENGINE}.use_expandable_segments": Fixed(
        _OFF,
        "setting the CUDA allocator of the engines",
        "the allocator the environment sets",
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before starting the run",
    ),
    f"{_ENGINE}.served_model_name": Rename("generator.http_endpoint.served_model_name"),
    f"{_ENGINE}.distributed_executor_backend": Fixed(
        ("ray", "mp"), "", "vLLM picks its executor inside each engine actor either way"
    ),
    f"{_ENGINE}.language_model_only": Fixed((False, True), "", "engines serve the language model only either way"),
    f"{_ENGINE}.speculative_config": Fixed(_NONE, "speculative decoding", "off"),
    f"{_ENGINE}.enable_pd": Fixed(_OFF, "prefill/decode (PD) disaggregation", "off"),
    f"{_ENGINE}.num_prefill": Ignored("prefill/decode (PD) disaggregation", f"{_ENGINE}.enable_pd"),
    f"{_ENGINE}.router_init_kwargs": Fixed(({},), "the vllm-router", "no router"),
    # ----- environment
    "environment.skyrl_gym": Rename("environment.env_configs"),
    "environment.skyrl_gym.max_env_workers": Rename("environment.max_env_workers"),
    # ----- per role
    **{key: rule for role in _ROLES for key, rule in _role_rules(role).items()},
}
"""Every upstream key spelled differently here, by dotted key (a section's rule covers the keys under it)."""

LEGACY_ONLY_PREFIXES = (
    *(f"generator.{name}" for name in _FLAT_ENGINE_KEYS),
    "generator.num_inference_engines",
    "generator.inference_engine_",
    "generator.async_engine",
    "generator.remote_inference_engine_urls",
    "generator.enable_http_endpoint",
    "generator.http_endpoint_",
    "generator.served_model_name",
    "trainer.use_sample_packing",
)
"""Keys only the legacy layout has: seeing one means a legacy script (see `upstream_meanings`)."""

PLUS_ADDED = ("trainer.algorithm.overlong_buffer.",)
"""Keys SkyRL's legacy scripts add with `+key=` (its YAML lacked them) that exist here: set, not refused."""

VALUE_RULES: dict[str, tuple[tuple[Any, Replace | Refuse], ...]] = {
    "trainer.strategy": (
        (
            "fsdp",
            Replace(
                "fsdp2",
                "runs FSDP2 (torch fully_shard), the only FSDP here, which is what SkyRL's current layout means by fsdp;"
                " its legacy layout meant FSDP1",
            ),
        ),
        ("deepspeed", Refuse("the DeepSpeed strategy", "trainer.strategy=fsdp2")),
    ),
    "trainer.resume_mode": ((None, Replace("none")), ("from_path", Replace("path"))),
    f"{_ENGINE}.weight_sync_backend": (
        (
            "nccl",
            Replace(
                "auto",
                "auto here: CUDA IPC when the engines share the policy's GPUs, an NCCL broadcast otherwise, as SkyRL's"
                " nccl does",
            ),
        ),
    ),
    "generator.sampling_params.additional_kwargs": ((None, Replace({})),),
    "generator.eval_sampling_params.additional_kwargs": ((None, Replace({})),),
    "generator.eval_sampling_params": ((None, Replace(NOTHING)),),
}
"""Upstream values of keys spelled alike here that are spelled differently here, or name a feature not supported
here."""

UPSTREAM_NAMES: dict[tuple[str, str], str] = {
    ("policy loss", "rollout_is"): "SkyRL's rollout importance-sampling loss",
    ("policy loss", "dppo"): "SkyRL's DPPO loss",
    ("loss reduction", "token_mean_legacy"): (
        "SkyRL's legacy per-micro-batch token mean (token_mean here is the mini-batch token mean, SkyRL's current"
        " token_mean)"
    ),
    ("loss reduction", "prompt_mean"): "SkyRL's per-prompt mean reduction",
    ("environment", "geometry3k"): "SkyRL's vision-language geometry environment",
    ("environment", "visgym"): "SkyRL's vision-language environment",
    ("environment", "openreward"): "SkyRL's OpenReward environment",
    ("environment", "rlm"): "SkyRL's recursive-LM environment",
    ("environment", "evidence_rlm"): "SkyRL's recursive-LM evidence environment",
    ("environment", "multipaper_evidence_rlm"): "SkyRL's recursive-LM evidence environment",
}
"""Registry names upstream has and this project does not, with what they are: an unregistered one is refused as
not supported here (a name you register yourself wins)."""
