"""Every call GPU-only code makes into vLLM, SGLang, megatron-core and torch's CUDA / distributed / CUDA IPC APIs, as
data: one row per (our module, library callable), checked against the pinned libraries' real source by
`tests/test_gpu_calls.py` (the arguments come from our source at each call site, so a renamed or dropped library
parameter fails CI, not a user's first GPU run), which also fails when a listed module gains a library call this
table lacks.

A row names the callee the way the module reaches it: import aliases expanded (`dist.TCPStore` ->
`torch.distributed.TCPStore`) and objects the module holds replaced by their library class (`GPU_MODULES[...]
.receivers`, e.g. `self.llm` -> `vllm.entrypoints.llm.LLM`). `defined` says where the library defines the callee
when that differs (a re-export, a method reached through a value); `kwargs` lists the keywords of a `**mapping` call
(its keys are not in the call's source); `accepts` names the classes whose fields a `**kwargs` parameter forwards to
(`vllm.LLM(**kw)` -> `EngineArgs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

PINNED = {"torch": "2.13.0", "vllm": "0.32.0", "sglang": "0.5.23", "megatron": "0.16.1"}
"""The library versions GPU code is written against: torch of the CPU suite and vLLM (`scripts/setup_vllm.sh`), the
lower bound of the `sglang` extra, megatron-core of the `megatron` extra. SGLang 0.5.23 itself pins torch 2.14.1."""


@dataclass(frozen=True)
class GpuModule:
    """A module whose calls into `roots` (library namespaces) run only on GPU machines; `receivers` maps the
    names it keeps library objects under to their classes."""

    path: str
    roots: tuple[str, ...]
    receivers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LibraryCall:
    """One library callable a GPU-only module calls (see the module docstring); `check` is `bind` (the call's
    arguments bind to the callable's signature), `fields` (its keywords are parameters or fields of `accepts`) or
    `exists` (the attribute exists: no arguments to check). `audit` is the call's id in the GPU audit."""

    module: str
    call: str
    defined: str = ""
    kwargs: tuple[str, ...] = ()
    check: str = "bind"
    accepts: tuple[str, ...] = ()
    audit: str = ""

    @property
    def target(self) -> str:
        """The dotted name the library defines it under."""
        return self.defined or self.call

    @property
    def library(self) -> str:
        """`torch`, `vllm`, `sglang` or `megatron`."""
        return self.target.split(".")[0]


TRAIN = "skyrl-train/skyrl_train/"
TX = "skyrl-tx/skyrl_tx/"
CUDA = ("torch.cuda",)

LLM = "vllm.entrypoints.llm.LLM"
LLM_ENGINE = "vllm.v1.engine.llm_engine.LLMEngine"
TOKENIZER_MANAGER = "sglang.srt.managers.tokenizer_manager.TokenizerManager"
IO = "sglang.srt.managers.io_struct"
SERIALIZER = "sglang.srt.utils.common.MultiprocessingSerializer"
WORKER = "vllm.v1.worker.gpu_worker.Worker"
CHAINED_OPTIMIZER = "megatron.core.optimizer.optimizer.ChainedOptimizer"
GPT_MODEL = "megatron.core.models.gpt.GPTModel"

GPU_MODULES: tuple[GpuModule, ...] = (
    GpuModule(
        TRAIN + "inference/vllm_engine.py",
        ("vllm", "torch.cuda"),
        {
            "self.llm": LLM,
            "llm": LLM,
            "self.llm.llm_engine": LLM_ENGINE,
            "engine": LLM_ENGINE,
            "self._vllm_sampling_params": "vllm.SamplingParams",
            "self._tokens_prompt": "vllm.inputs.TokensPrompt",
            "self._lora_request_cls": "vllm.lora.request.LoRARequest",
            "worker": WORKER,
        },
    ),
    GpuModule(
        TRAIN + "inference/vllm_stepping.py",
        ("vllm",),
        {"self.llm": LLM, "self.llm.llm_engine": LLM_ENGINE, "engine": LLM_ENGINE},
    ),
    GpuModule(TRAIN + "inference/vllm_worker_extension.py", ("vllm",), {"self": WORKER}),
    GpuModule(
        TRAIN + "inference/sglang_engine.py",
        ("sglang", "torch.cuda"),
        {
            "sglang": "sglang",  # the module `import_sglang()` returns
            "self.engine": "sglang.srt.entrypoints.engine.Engine",
            "self.manager": TOKENIZER_MANAGER,
            "self.io": IO,
            "self.serializer": SERIALIZER,
        },
    ),
    GpuModule(
        TRAIN + "inference/sglang_sync.py",
        ("sglang", "torch.multiprocessing"),
        {
            "metadata_cls": "sglang.srt.weight_sync.tensor_bucket.FlattenedTensorMetadata",
            "engine.serializer": SERIALIZER,
        },
    ),
    GpuModule(TRAIN + "inference/sglang_convert.py", ("sglang",)),
    GpuModule(
        TRAIN + "weight_sync/cuda_ipc.py",
        ("torch.cuda", "torch.multiprocessing"),
        {"reduce": "torch.multiprocessing.reductions.reduce_tensor"},
    ),
    GpuModule(TRAIN + "weight_sync/process_group.py", ("torch.distributed",)),
    GpuModule(TRAIN + "weight_sync/locations.py", CUDA),
    GpuModule(TRAIN + "workers/distributed.py", ("torch.cuda", "torch.distributed")),
    GpuModule(TRAIN + "workers/worker.py", CUDA),
    GpuModule(TRAIN + "workers/channel.py", CUDA),
    GpuModule(TRAIN + "workers/strategy/fsdp2.py", ("torch.cuda", "torch.distributed.fsdp.CPUOffloadPolicy")),
    GpuModule(
        TRAIN + "workers/strategy/megatron.py",
        ("megatron", "torch.cuda"),
        {
            "self.optimizer": CHAINED_OPTIMIZER,
            "optimizer": CHAINED_OPTIMIZER,
            "self.ddp_model": "megatron.core.distributed.DistributedDataParallel",
            "self._gpt()": GPT_MODEL,
            "gpt": GPT_MODEL,
        },
    ),
    GpuModule(
        TRAIN + "workers/strategy/megatron_checkpoint.py",
        ("megatron",),
        {"self.optimizer": CHAINED_OPTIMIZER, "self._gpt()": GPT_MODEL},
    ),
    GpuModule(TRAIN + "workers/strategy/megatron_model.py", ("megatron", "torch.cuda")),
    GpuModule(TRAIN + "workers/strategy/megatron_packing.py", ("megatron",)),
    GpuModule(TRAIN + "workers/strategy/megatron_lora.py", ("megatron",)),
    GpuModule(
        TRAIN + "workers/strategy/megatron_schedule.py",
        ("megatron",),
        {"schedule": "megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_without_interleaving"},
    ),
    GpuModule(TRAIN + "utils/rng_state.py", CUDA),
    GpuModule(TRAIN + "config/root.py", CUDA),
    GpuModule(TRAIN + "config/auto_settings.py", CUDA),
    GpuModule(TRAIN + "entrypoints/doctor_probes.py", CUDA),
    GpuModule(TRAIN + "models/megatron_convert.py", ("megatron",)),
    GpuModule(TX + "vllm_sampler.py", ("vllm",), {"self.engine.llm": LLM, "worker": WORKER}),
    GpuModule(TX + "cli.py", CUDA),
)
"""The modules whose library calls this table must cover (a test also fails when a module outside this list starts
importing vLLM, SGLang or megatron-core, or calling `torch.cuda`)."""


def _calls(module: str, *rows: tuple) -> tuple[LibraryCall, ...]:
    """Rows of one module: `(call, **fields)` pairs, or a bare call name."""
    return tuple(
        LibraryCall(module, row) if isinstance(row, str) else LibraryCall(module, row[0], **row[1]) for row in rows
    )


VLLM_ENGINE_KWARGS = (
    "model", "tokenizer", "dtype", "seed", "max_num_seqs", "tensor_parallel_size", "gpu_memory_utilization",
    "enable_prefix_caching", "enforce_eager", "logprobs_mode", "enable_sleep_mode", "max_model_len", "enable_lora",
    "max_lora_rank", "max_loras", "distributed_executor_backend",
)  # fmt: skip
"""`vllm_engine.llm_kwargs` (every key it can set)."""

VLLM_SAMPLING_KWARGS = (
    "n", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens", "stop", "stop_token_ids",
    "include_stop_str_in_output", "ignore_eos", "seed", "logprobs", "prompt_logprobs",
)  # fmt: skip
"""`VLLMInferenceEngine.vllm_params` (the user's `additional_kwargs` come on top, checked by vLLM at run time)."""

SGLANG_ENGINE_KWARGS = (
    "model_path", "tokenizer_path", "dtype", "tp_size", "mem_fraction_static", "max_running_requests", "random_seed",
    "disable_radix_cache", "disable_prefill_cuda_graph", "disable_decode_cuda_graph", "enable_memory_saver",
    "enable_weights_cpu_backup", "enable_deterministic_inference", "attention_backend", "weight_version",
)  # fmt: skip
"""`sglang_convert.engine_kwargs`."""

MEGATRON_OPTIMIZER_KWARGS = (
    "optimizer", "lr", "weight_decay", "adam_beta1", "adam_beta2", "clip_grad", "use_distributed_optimizer", "bf16",
    "fp16", "params_dtype", "optimizer_cpu_offload", "optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d",
    "use_precision_aware_optimizer",
)  # fmt: skip
"""`megatron.megatron_optimizer_kwargs`."""

TRANSFORMER_CONFIG_KWARGS = (
    "activation_func", "add_bias_linear", "add_qkv_bias", "apply_rope_fusion", "attention_dropout", "bf16",
    "bias_dropout_fusion", "expert_model_parallel_size", "expert_tensor_parallel_size", "ffn_hidden_size", "fp16", "gated_linear_unit",
    "gradient_accumulation_fusion", "hidden_dropout", "hidden_size", "kv_channels", "layernorm_epsilon",
    "masked_softmax_fusion", "moe_aux_loss_coeff", "moe_ffn_hidden_size", "moe_grouped_gemm",
    "moe_router_enable_expert_bias", "moe_router_load_balancing_type", "moe_router_pre_softmax", "moe_router_score_function",
    "moe_router_topk", "moe_token_dispatcher_type",
    "normalization", "num_attention_heads", "num_layers", "num_moe_experts", "num_query_groups", "params_dtype",
    "persist_layer_norm", "qk_layernorm", "recompute_granularity", "recompute_method", "recompute_num_layers",
    "sequence_parallel", "tensor_model_parallel_size", "use_cpu_initialization",
)  # fmt: skip
"""`megatron_model.transformer_config_kwargs` (plain, recompute and MoE models together)."""

GPU_MODEL = "vllm.v1.worker.gpu_model_runner.GPUModelRunner.model"

CALLS: tuple[LibraryCall, ...] = (
    *_calls(
        TRAIN + "inference/vllm_engine.py",
        (
            "vllm.LLM",
            dict(
                defined=LLM,
                check="fields",
                kwargs=VLLM_ENGINE_KWARGS,
                accepts=("vllm.engine.arg_utils.EngineArgs",),
                audit="V2",
            ),
        ),
        ("vllm.SamplingParams", dict(defined="vllm.sampling_params.SamplingParams", kwargs=VLLM_SAMPLING_KWARGS)),
        (
            "vllm.inputs.TokensPrompt",
            dict(defined="vllm.inputs.llm.TokensPrompt", check="fields", accepts=("vllm.inputs.llm.TokensPrompt",)),
        ),
        "vllm.lora.request.LoRARequest",
        (LLM + ".collective_rpc", dict(audit="V6, V10")),
        (LLM + ".generate", dict(audit="V7")),
        (LLM + ".get_tokenizer", dict(audit="V6")),
        (LLM + ".reset_prefix_cache", dict(audit="V11")),
        (LLM + ".sleep", dict(audit="V8")),
        (LLM + ".wake_up", dict(audit="V9")),
        (LLM_ENGINE + ".add_lora", dict(audit="V12")),
        (LLM_ENGINE + ".remove_lora", dict(audit="V12")),
        (LLM_ENGINE + ".model_config", dict(audit="V6")),
        LLM_ENGINE + ".reset_prefix_cache",
        LLM_ENGINE + ".set_weight_version",
        ("vllm.sampling_params.RequestOutputKind.FINAL_ONLY", dict(check="exists")),
        (WORKER + ".model_runner.model", dict(defined=GPU_MODEL, audit="V6")),
        (WORKER + ".model_runner.model.named_parameters", dict(defined=GPU_MODEL, check="exists")),
        ("torch.cuda.mem_get_info", dict(audit="V4")),
    ),
    *_calls(
        TRAIN + "inference/vllm_stepping.py",
        # the engine loop of in-flight (token-boundary) weight updates
        LLM_ENGINE + ".add_request",
        LLM_ENGINE + ".step",
        LLM_ENGINE + ".has_unfinished_requests",
        LLM_ENGINE + ".abort_request",
    ),
    *_calls(
        TRAIN + "inference/vllm_worker_extension.py",
        (WORKER + ".model_runner.model", dict(defined=GPU_MODEL, audit="V16")),
        (WORKER + ".vllm_config.model_config.hf_config", dict(defined="vllm.config.model.ModelConfig.hf_config")),
        (
            WORKER + ".vllm_config.parallel_config.tensor_parallel_size",
            dict(defined="vllm.config.parallel.ParallelConfig.tensor_parallel_size", audit="V16"),
        ),
    ),
    *_calls(
        TX + "vllm_sampler.py",
        (
            "vllm.ModelRegistry.register_model",
            dict(defined="vllm.model_executor.models.registry._ModelRegistry.register_model", audit="T5"),
        ),
        (LLM + ".collective_rpc", dict(audit="T5")),
        (WORKER + ".model_runner.model", dict(defined=GPU_MODEL)),
    ),
    *_calls(
        TRAIN + "inference/sglang_engine.py",
        (
            "sglang.Engine",
            dict(
                defined="sglang.srt.entrypoints.engine.Engine",
                check="fields",
                kwargs=SGLANG_ENGINE_KWARGS,
                accepts=("sglang.srt.arg_groups.fields.*",),
                audit="S2, S7",
            ),
        ),
        ("sglang.srt.entrypoints.engine.Engine.async_generate", dict(audit="S8")),
        ("sglang.srt.entrypoints.engine.Engine.shutdown", dict(audit="S22")),
        ("sglang.srt.entrypoints.engine.Engine.tokenizer_manager", dict(audit="S7")),
        (
            "sglang.srt.sampling.sampling_params.SamplingParams.__struct_fields__",
            dict(defined="sglang.srt.sampling.sampling_params.SamplingParams", check="exists", audit="S6"),
        ),
        (TOKENIZER_MANAGER + ".context_len", dict(audit="S7")),
        (TOKENIZER_MANAGER + ".pause_generation", dict(audit="S10")),
        (TOKENIZER_MANAGER + ".continue_generation", dict(audit="S11")),
        (TOKENIZER_MANAGER + ".release_memory_occupation", dict(audit="S12")),
        (TOKENIZER_MANAGER + ".resume_memory_occupation", dict(audit="S13")),
        (TOKENIZER_MANAGER + ".flush_cache", dict(audit="S14")),
        (TOKENIZER_MANAGER + ".begin_weight_update", dict(audit="S15")),
        (TOKENIZER_MANAGER + ".end_weight_update", dict(audit="S15")),
        (TOKENIZER_MANAGER + ".update_weights_from_tensor", dict(audit="S16")),
        (TOKENIZER_MANAGER + ".update_weights_from_distributed", dict(audit="S17")),
        (TOKENIZER_MANAGER + ".init_weights_update_group", dict(audit="S18")),
        (TOKENIZER_MANAGER + ".destroy_weights_update_group", dict(audit="S19")),
        (TOKENIZER_MANAGER + ".get_weights_by_name", dict(audit="S21")),
        (TOKENIZER_MANAGER + ".update_weight_version", dict(audit="new: in-flight updates label versions")),
        (IO + ".PauseGenerationReqInput", dict(audit="S10")),
        (IO + ".ContinueGenerationReqInput", dict(audit="S11")),
        (IO + ".ReleaseMemoryOccupationReqInput", dict(audit="S12")),
        (IO + ".ResumeMemoryOccupationReqInput", dict(audit="S13")),
        (IO + ".BeginWeightUpdateReqInput", dict(audit="S15")),
        (IO + ".EndWeightUpdateReqInput", dict(audit="S15")),
        (IO + ".UpdateWeightsFromTensorReqInput", dict(audit="S16")),
        (IO + ".UpdateWeightsFromDistributedReqInput", dict(audit="S17")),
        (IO + ".InitWeightsUpdateGroupReqInput", dict(audit="S18")),
        (IO + ".DestroyWeightsUpdateGroupReqInput", dict(audit="S19")),
        (IO + ".GetWeightsByNameReqInput", dict(audit="S21")),
        (IO + ".UpdateWeightVersionReqInput", dict(audit="new: in-flight updates label versions")),
        (SERIALIZER + ".serialize", dict(audit="S20")),
    ),
    *_calls(
        TRAIN + "inference/sglang_sync.py",
        ("sglang.srt.weight_sync.tensor_bucket.FlattenedTensorMetadata", dict(audit="S25")),
        (SERIALIZER + ".serialize", dict(audit="S20, S26")),
        ("torch.multiprocessing.reductions.rebuild_cuda_tensor", dict(audit="S23")),
    ),
    *_calls(
        TRAIN + "weight_sync/cuda_ipc.py",
        ("torch.multiprocessing.reductions.reduce_tensor", dict(audit="W1, S26")),
        ("torch.cuda.current_stream", dict(audit="W4")),
        ("torch.cuda.current_stream().synchronize", dict(defined="torch.cuda.Stream.synchronize", audit="W4")),
        ("torch.cuda.device_count", dict(audit="W3")),
        ("torch.cuda.get_device_properties", dict(audit="W3")),
        ("torch.cuda.get_device_properties().uuid", dict(defined="torch._C._CudaDeviceProperties.uuid", audit="W3")),
        ("torch.cuda.ipc_collect", dict(audit="W5")),
        ("torch.cuda.synchronize", dict(audit="W6")),
    ),
    *_calls(
        TRAIN + "weight_sync/process_group.py",
        ("torch.distributed.ProcessGroupNCCL", dict(defined="torch._C._distributed_c10d.ProcessGroupNCCL", audit="W7")),
        (
            "torch.distributed.ProcessGroupNCCL.Options",
            dict(defined="torch._C._distributed_c10d.ProcessGroupNCCL.Options", audit="W7"),
        ),
        ("torch.distributed.ProcessGroupGloo", dict(defined="torch._C._distributed_c10d.ProcessGroupGloo")),
        ("torch.distributed.TCPStore", dict(defined="torch._C._distributed_c10d.TCPStore", audit="W8")),
        ("torch.distributed.PrefixStore", dict(defined="torch._C._distributed_c10d.PrefixStore", audit="W8")),
        (
            "torch.distributed.BroadcastOptions",
            dict(defined="torch._C._distributed_c10d.BroadcastOptions", audit="W10"),
        ),
        ("torch.distributed.DistStoreError", dict(audit="W14")),
    ),
    *_calls(
        TRAIN + "workers/distributed.py",
        "torch.cuda.is_available",
        "torch.cuda.current_device",
        ("torch.cuda.set_device", dict(audit="F1")),
        ("torch.distributed.init_process_group", dict(audit="F1, F4")),
        ("torch.distributed.TCPStore", dict(defined="torch._C._distributed_c10d.TCPStore")),
        ("torch.distributed.PrefixStore", dict(defined="torch._C._distributed_c10d.PrefixStore", audit="F1")),
        "torch.distributed.is_initialized",
        "torch.distributed.get_rank",
        "torch.distributed.get_world_size",
    ),
    *_calls(
        TRAIN + "workers/worker.py",
        ("torch.cuda.empty_cache", dict(audit="F6")),
        ("torch.cuda.memory_reserved", dict(audit="F6")),
        ("torch.cuda.memory_allocated", dict(audit="F6")),
    ),
    *_calls(TRAIN + "workers/channel.py", ("torch.cuda.set_device", dict(audit="F9"))),
    *_calls(TRAIN + "workers/strategy/fsdp2.py", ("torch.distributed.fsdp.CPUOffloadPolicy", dict(audit="F4"))),
    *_calls(
        TRAIN + "workers/strategy/megatron.py",
        ("torch.cuda.set_device", dict(audit="G1")),
        ("megatron.core.parallel_state.initialize_model_parallel", dict(audit="G1")),
        ("megatron.core.parallel_state.model_parallel_is_initialized", dict(audit="G1")),
        ("megatron.core.parallel_state.get_tensor_model_parallel_rank", dict(audit="G11")),
        ("megatron.core.parallel_state.get_tensor_model_parallel_group", dict(audit="G11")),
        ("megatron.core.parallel_state.get_expert_model_parallel_rank", dict(audit="G11")),
        ("megatron.core.parallel_state.get_expert_model_parallel_group", dict(audit="G11")),
        "megatron.core.parallel_state.get_expert_tensor_parallel_rank",
        "megatron.core.parallel_state.get_expert_tensor_parallel_group",
        ("megatron.core.tensor_parallel.model_parallel_cuda_manual_seed", dict(audit="G2, G14")),
        ("megatron.core.distributed.DistributedDataParallelConfig", dict(audit="G7")),
        ("megatron.core.distributed.DistributedDataParallel", dict(audit="G7")),
        ("megatron.core.distributed.DistributedDataParallel.zero_grad_buffer", dict(audit="G9")),
        ("megatron.core.optimizer.OptimizerConfig", dict(check="fields", kwargs=MEGATRON_OPTIMIZER_KWARGS, audit="G8")),
        ("megatron.core.optimizer.get_megatron_optimizer", dict(audit="G8")),
        (CHAINED_OPTIMIZER + ".param_groups", dict(audit="G9")),
        (CHAINED_OPTIMIZER + ".step", dict(audit="G9")),
        (CHAINED_OPTIMIZER + ".zero_grad", dict(audit="G9")),
        GPT_MODEL + ".state_dict",
        GPT_MODEL + ".load_state_dict",
        GPT_MODEL + ".cuda",
        GPT_MODEL + ".eval",
        "megatron.core.parallel_state.get_pipeline_model_parallel_rank",
        "megatron.core.parallel_state.get_pipeline_model_parallel_first_rank",
        "megatron.core.parallel_state.is_pipeline_first_stage",
        "megatron.core.parallel_state.get_pipeline_model_parallel_group",
        ("megatron.core.distributed.finalize_model_grads.finalize_model_grads", dict(audit="G9")),
    ),
    *_calls(
        TRAIN + "workers/strategy/megatron_schedule.py",
        "megatron.core.pipeline_parallel.get_forward_backward_func",
        "megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_without_interleaving",
        "megatron.core.parallel_state.is_pipeline_last_stage",
        "megatron.core.parallel_state.get_pipeline_model_parallel_last_rank",
        "megatron.core.parallel_state.get_pipeline_model_parallel_group",
    ),
    *_calls(TRAIN + "workers/strategy/megatron_packing.py", "megatron.core.packed_seq_params.PackedSeqParams"),
    *_calls(
        TRAIN + "workers/strategy/megatron_checkpoint.py",
        (CHAINED_OPTIMIZER + ".sharded_state_dict", dict(audit="G12")),
        (CHAINED_OPTIMIZER + ".load_state_dict", dict(audit="G13")),
        ("megatron.core.dist_checkpointing.save", dict(audit="G13")),
        ("megatron.core.dist_checkpointing.load", dict(audit="G13")),
        (GPT_MODEL + ".sharded_state_dict", dict(audit="G12")),
        GPT_MODEL + ".load_state_dict",
    ),
    *_calls(
        TRAIN + "workers/strategy/megatron_lora.py",
        "megatron.core.tensor_parallel.mappings.copy_to_tensor_model_parallel_region",
        "megatron.core.tensor_parallel.mappings.reduce_from_tensor_model_parallel_region",
        "megatron.core.tensor_parallel.mappings.gather_from_sequence_parallel_region",
        "megatron.core.tensor_parallel.mappings.reduce_scatter_to_sequence_parallel_region",
        "megatron.core.transformer.utils.make_sharded_tensors_for_checkpoint",
        "megatron.core.tensor_parallel.layers.set_tensor_model_parallel_attributes",
    ),
    *_calls(
        TRAIN + "workers/strategy/megatron_model.py",
        (
            "megatron.core.transformer.TransformerConfig",
            dict(check="fields", kwargs=TRANSFORMER_CONFIG_KWARGS, audit="G3"),
        ),
        ("megatron.core.models.gpt.gpt_layer_specs.get_gpt_layer_local_spec", dict(audit="G4")),
        ("megatron.core.models.gpt.GPTModel", dict(audit="G5")),
        "megatron.core.transformer.transformer_block.get_num_layers_to_build",
        "megatron.core.transformer.transformer_block.TransformerBlockSubmodules",
        "torch.cuda.is_available",
    ),
    *_calls(
        TRAIN + "weight_sync/locations.py",
        ("torch.cuda.is_initialized", dict(audit="W3")),
        ("torch.cuda.current_device", dict(audit="W3")),
    ),
    *_calls(
        TRAIN + "utils/rng_state.py",
        "torch.cuda.is_available",
        "torch.cuda.is_initialized",
        "torch.cuda.device_count",
        ("torch.cuda.get_rng_state_all", dict(audit="F8")),
        ("torch.cuda.set_rng_state_all", dict(audit="F8")),
    ),
    *_calls(TRAIN + "config/root.py", "torch.cuda.is_available"),
    *_calls(
        TRAIN + "entrypoints/doctor_probes.py",
        "torch.cuda.is_available",
        "torch.cuda.device_count",
        "torch.cuda.get_device_properties",
    ),
    *_calls(TRAIN + "config/auto_settings.py", "torch.cuda.is_available", "torch.cuda.get_device_properties"),
    *_calls(TX + "cli.py", "torch.cuda.is_available"),
)
"""Every row, by module (see `LibraryCall`)."""
