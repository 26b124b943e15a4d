"""The rules for NovaSky-AI/SkyRL's per-role keys (`trainer.policy`, `trainer.ref`, `trainer.critic`), their FSDP,
LoRA and profiler settings and their `megatron_config` (see `upstream_rules` for what each kind of rule means)."""

from skyrl_train.config.upstream_rules import NONE, NOTHING, OFF, Fixed, Ignored, Rename, Rule

ROLES = ("policy", "ref", "critic")
"""The roles whose sections upstream and this project share."""

MODEL_ROLES = ("policy", "ref")
"""The roles that have a Megatron section."""

MTP = "multi-token-prediction (MTP) heads and speculative decoding"
"""The feature upstream's MTP keys ask for."""

_PROFILER = "the torch profiler"


def role_rules(role: str) -> dict[str, Rule]:
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
        f"{prefix}.model.fake_int4_qat.enabled": Fixed(OFF, "INT4 quantization-aware training", "off"),
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
        f"{prefix}.model.lora.max_cpu_loras": Fixed(NONE, "sizing vLLM's CPU LoRA cache", "vLLM's default"),
    }
    if role in MODEL_ROLES:
        rules.update(_megatron_rules(role))
    if role != "ref":
        rules[f"{prefix}.optimizer_config"] = Rename(f"{prefix}.optimizer")
    if role == "policy":
        rules.update(
            {
                f"{prefix}.use_torch_compile": Fixed(OFF, "torch.compile of the logits computation", "eager"),
                f"{prefix}.record_memory": Fixed(OFF, "CUDA memory snapshots", "off"),
                f"{prefix}.torch_profiler_config": Ignored(_PROFILER, f"{prefix}.torch_profiler_config.enable"),
                f"{prefix}.torch_profiler_config.enable": Fixed(OFF, _PROFILER, "off"),
                f"{prefix}.inference_only_init": Fixed(OFF, "inference-only policy workers", "the policy trains"),
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
        **{f"{prefix}.{name}": Fixed(OFF, feature, "off") for name, feature in off_features.items()},
        f"{prefix}.expert_tensor_parallel_size": Rename(f"trainer.{role}.megatron.expert_tensor_parallel_size"),
        f"{prefix}.moe_token_dispatcher_type": Fixed(("alltoall",), "other MoE token dispatchers", "all-to-all"),
        f"{prefix}.moe_router_load_balancing_type": Fixed(
            ("none",), "MoE load-balancing losses", "no load-balancing loss"
        ),
        f"{prefix}.moe_aux_loss_coeff": Fixed((0.0,), "MoE auxiliary losses", "no auxiliary loss"),
        f"{prefix}.moe_grouped_gemm": Fixed(
            (True, False), "", "experts run as separate GEMMs either way (same results, no grouped-GEMM kernel)"
        ),
        f"{prefix}.moe_router_score_function": Rename(f"trainer.{role}.megatron.moe_router_score_function"),
        f"{prefix}.moe_router_enable_expert_bias": Rename(f"trainer.{role}.megatron.moe_router_enable_expert_bias"),
        f"{prefix}.moe_router_dtype": Fixed(("fp32",), "other MoE router dtypes", "fp32 routing"),
        f"{prefix}.ddp_config": Fixed((), "other Megatron DDP settings", ""),
        f"{prefix}.ddp_config.grad_reduce_in_fp32": Fixed((True,), "reducing gradients in bf16", "fp32 reduction"),
        f"{prefix}.ddp_config.overlap_grad_reduce": Fixed(OFF, "overlapping the gradient reduction", "off"),
        f"{prefix}.ddp_config.overlap_param_gather": Fixed(OFF, "overlapping the parameter gather", "off"),
        f"{prefix}.ddp_config.average_in_collective": Fixed(
            (True, False), "", "gradients are averaged over the data-parallel ranks either way"
        ),
        f"{prefix}.hf_export_config": Ignored(
            "distributed Megatron HF exports", f"{prefix}.hf_export_config.distributed_save"
        ),
        f"{prefix}.hf_export_config.distributed_save": Fixed(
            OFF, "distributed Megatron HF exports", "one rank writes the export"
        ),
        f"{prefix}.lora_config": Fixed((), "other Megatron LoRA settings", ""),
        f"{prefix}.lora_config.lora_type": Fixed(
            ("canonical_lora",),
            "fused LoRA adapters (lora_type=lora: one adapter over q/k/v and one over gate/up)",
            "one adapter per projection, as peft and vLLM name them (canonical_lora)",
        ),
        f"{prefix}.lora_config.merge_lora": Fixed(
            (True, False),
            "",
            "each weight sync sends the adapters alone; the engines apply them on their base weights (vLLM's LoRA,"
            " or merged by the hf engine)",
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
            OFF, "fused gradient accumulation (needs Transformer Engine)", "off"
        ),
        **{
            f"{transformer_kwargs}.num_layers_in_{end}_pipeline_stage": Rename(
                f"trainer.{role}.megatron.num_layers_in_{end}_pipeline_stage"
            )
            for end in ("first", "last")
        },
        **{
            f"{transformer_kwargs}.{name}": Rename(f"{prefix}.{name}")
            for name in (
                "moe_token_dispatcher_type",
                "moe_router_load_balancing_type",
                "moe_aux_loss_coeff",
                "moe_grouped_gemm",
                "moe_router_dtype",
            )
        },
        **{
            f"{transformer_kwargs}.{name}": Rename(f"trainer.{role}.megatron.{name}")
            for name in ("moe_router_score_function", "moe_router_enable_expert_bias")
        },
        f"{prefix}.model_config_kwargs": Fixed(({},), "overriding the model config for Megatron", "the model's own"),
        f"{prefix}.empty_cuda_cache": Fixed(
            (None, True, False), "", "no manual CUDA cache flush either way (memory handling only; same results)"
        ),
        f"{prefix}.torch_profiler_config": Ignored(_PROFILER, f"{prefix}.torch_profiler_config.enable"),
        f"{prefix}.torch_profiler_config.enable": Fixed(OFF, _PROFILER, "off"),
        f"{prefix}.mtp_num_layers": Fixed(NONE, MTP, "none"),
        f"{prefix}.mtp_loss_weight": Ignored(MTP, mtp_switch),
        f"{prefix}.mtp_loss_chunk_size": Ignored(MTP, mtp_switch),
        f"{prefix}.mtp_loss_topk": Ignored(MTP, mtp_switch),
        f"{prefix}.async_dist_ckpt_strategy": Ignored(
            "asynchronous distributed checkpoint saves", f"{prefix}.async_dist_ckpt_save"
        ),
    }
