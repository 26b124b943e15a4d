"""What each key and value of NovaSky-AI/SkyRL's config (both its layouts) is in this project: the tables.

`RULES` holds one rule (`upstream_rules`) for every upstream key this project does not spell the same way, the
per-role sections' from `upstream_role_keys`. `VALUE_RULES` does the same for upstream values of keys spelled alike
(`trainer.strategy=fsdp`, `trainer.resume_mode=null`, ...), and `UPSTREAM_NAMES` names upstream registry entries this
project lacks, so an unregistered `dppo` loss is refused as SkyRL's DPPO instead of as a typo.
`docs/migrating-from-skyrl.md` is the user-facing list, `docs/reference/skyrl-keys.md` the generated one.
"""

from typing import Any, Optional

from skyrl_train.config.upstream_role_keys import MODEL_ROLES, MTP, ROLES, role_rules
from skyrl_train.config.upstream_rules import (
    NONE,
    NOTHING,
    OFF,
    Checked,
    Fixed,
    Ignored,
    Refuse,
    Remote,
    Rename,
    Replace,
    Rule,
)

ENGINE = "generator.inference_engine"
"""The section of this project (and of upstream's current layout) that the legacy flat engine keys moved into."""

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


RULES: dict[str, Rule] = {
    # ----- data
    "data.dataloader.num_workers": Rename("data.num_workers", values=((None, 0),)),
    "data.dataloader.persistent_workers": Fixed(OFF, "persistent data-loader workers", "prompts load in the driver"),
    # ----- trainer scalars
    "trainer.max_prompt_length": Rename("data.max_prompt_length"),
    "trainer.gradient_checkpointing": Rename(
        ("trainer.policy.gradient_checkpointing", "trainer.critic.gradient_checkpointing")
    ),
    "trainer.gradient_checkpointing_use_reentrant": Fixed(OFF, "reentrant activation checkpointing", "non-reentrant"),
    "trainer.sequence_parallel_backend": Fixed(
        ("ulysses",),
        "other sequence-parallel backends",
        "names Ulysses, the sequence parallelism `sequence_parallel_size` runs",
    ),
    "trainer.bf16": Rename(
        tuple(f"trainer.{role}.fsdp.mixed_precision.param_dtype" for role in ROLES)
        + tuple(f"trainer.{role}.megatron.param_dtype" for role in MODEL_ROLES),
        values=((True, NOTHING), (False, "float32")),
    ),
    "trainer.use_expandable_segments": Fixed(
        OFF,
        "setting the CUDA allocator of the training workers",
        "the allocator the environment sets",
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before starting the run",
    ),
    "trainer.flash_attn": Fixed(
        (True, False), "", "attention runs through PyTorch SDPA, which uses flash-attention kernels on CUDA"
    ),
    "trainer.disable_fast_tokenizer": Fixed(OFF, "slow (Python) tokenizers", "the fast tokenizer"),
    "trainer.update_ref_every_epoch": Fixed(OFF, "re-syncing the reference model every epoch", "a frozen reference"),
    "trainer.recompute_old_logprobs_per_minibatch": Fixed(
        (True,), "one full-batch forward for the old log-probs", "old log-probs follow the training mini-batches"
    ),
    "trainer.use_sample_packing": Rename("trainer.remove_microbatch_padding"),
    "trainer.dump_eval_results": Fixed(
        (True,), "turning evaluation dumps off", "evaluation results are written under trainer.export_path"
    ),
    "trainer.enable_ray_gpu_monitor": Fixed(OFF, "the background Ray GPU monitor", "off"),
    "trainer.tags": Fixed(NONE, "run tags in the tracking backends", "no tags"),
    "trainer.print_example_interval": Fixed((0, -1), "printing an example rollout every N steps", "off"),
    "trainer.log_example_interval": Fixed((0, -1), "logging an example prompt every N steps", "off"),
    "trainer.num_logger_eval_samples": Fixed((0, -1), "uploading evaluation samples to the tracker", "off"),
    "trainer.num_logger_train_samples": Fixed((0, -1), "uploading training samples to the tracker", "off"),
    "trainer.logprobs_chunk_size": Fixed(
        (1024, None), "choosing the log-prob chunk size", "log-probs are computed per micro-batch (same values)"
    ),
    "trainer.vocab_entropy_chunk_size": Fixed((0,), "chunked vocabulary entropy", "unchunked"),
    "trainer.vocab_entropy_chunk_memory_mb": Fixed((512,), "chunked vocabulary entropy", "unchunked"),
    "trainer.fused_lm_head_logprob": Fixed(OFF, "the fused LM-head log-prob kernel", "off"),
    "trainer.fused_lm_head_logprob_backend": Ignored(
        "the fused LM-head log-prob kernel", "trainer.fused_lm_head_logprob"
    ),
    "trainer.rope_scaling": Fixed(NONE, "RoPE overrides", "the model's own RoPE"),
    "trainer.rope_theta": Fixed(NONE, "RoPE overrides", "the model's own RoPE"),
    "trainer.mtp": Ignored(MTP, "trainer.mtp.enabled"),
    "trainer.mtp.enabled": Fixed(OFF, MTP, "off"),
    "trainer.fully_async.enabled": Rename("trainer.mode", values=((True, "fully_async"), (False, NOTHING))),
    "trainer.fully_async.max_staleness_steps": Rename("trainer.async_rl.max_staleness"),
    "trainer.fully_async.num_parallel_generation_workers": Checked(
        _generation_workers, "as many groups in flight as the staleness bound admits"
    ),
    "trainer.fully_async.sample_full_batch": Fixed(OFF, "sampling whole batches in fully_async mode", "off"),
    "trainer.fully_async.clear_kv_cache_on_weight_sync": Fixed(
        OFF, "clearing the KV cache of running requests at a weight sync", "running requests keep their context"
    ),
    "trainer.fully_async.simulate_training": Fixed(OFF, "simulated training (a generation benchmark)", "off"),
    "trainer.fully_async.simulate_training_step_seconds": Ignored(
        "simulated training", "trainer.fully_async.simulate_training"
    ),
    "trainer.fully_async.simulate_weight_sync_seconds": Ignored(
        "simulated training", "trainer.fully_async.simulate_training"
    ),
    # ----- algorithm
    "trainer.algorithm.temperature": Fixed(
        NONE,
        "a training temperature other than the sampling one",
        "the sampling temperature",
        "log-probs always use generator.sampling_params.temperature",
    ),
    "trainer.algorithm.value_head_prefix": Fixed(("value_head",), "renaming the critic's value head", "value_head"),
    "trainer.algorithm.zero_variance_filter": Fixed(
        OFF,
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
        f"trainer.algorithm.off_policy_correction.{name}_{end}": Fixed(NONE, feature, "off")
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
    "generator.num_inference_engines": Rename(f"{ENGINE}.num_engines"),
    **{
        f"generator.inference_engine_{kind}_parallel_size": Rename(f"{ENGINE}.{kind}_parallel_size")
        for kind in ("tensor", "pipeline", "expert", "data")
    },
    **{f"generator.{name}": Rename(f"{ENGINE}.{name}") for name in _FLAT_ENGINE_KEYS},
    "generator.model_name": Checked(_policy_model, "the engines serve the policy's model"),
    "generator.async_engine": Fixed(
        (True, False), "", "engines are asynchronous either way (SkyRL's synchronous engine samples the same)"
    ),
    f"{ENGINE}.async_engine": Fixed(
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
    # ----- generator (current layout)
    "generator.append_eos_token_after_stop_str_in_multi_turn": Fixed(
        (True,),
        "continuing a turn without an eos after a stop string",
        "a turn that ends on a stop string is closed with the eos token",
    ),
    "generator.use_cache_salt": Fixed(OFF, "salting the prefix cache with the weight version", "off"),
    "generator.vision_language_generator": Fixed(OFF, "vision-language (VLM) rollouts", "text only"),
    "generator.merge_stepwise_output": Fixed(OFF, "merging step-wise samples back into trajectories", "off"),
    "generator.rate_limit": Ignored("rate-limiting trajectories", "generator.rate_limit.enabled"),
    "generator.rate_limit.enabled": Fixed(OFF, "rate-limiting trajectories", "off"),
    f"{ENGINE}.run_engines_locally": Remote("locally"),
    f"{ENGINE}.external_server_urls": Remote("urls"),
    f"{ENGINE}.external_proxy_url": Remote("proxy"),
    f"{ENGINE}.pipeline_parallel_size": Fixed((1,), "pipeline parallelism inside an inference engine", "none"),
    f"{ENGINE}.data_parallel_size": Fixed(
        (1,),
        "data parallelism inside one inference engine",
        "one replica per engine",
        f"{ENGINE}.num_engines adds replicas",
    ),
    f"{ENGINE}.weight_transfer_threshold_cuda_ipc_GB": Fixed(
        (1.0,), "choosing the CUDA-IPC bucket size", "weights go in the strategies' fixed-size chunks"
    ),
    f"{ENGINE}.delta_weight_sync.checkpoint_load_format": Fixed(
        ("vllm_multi_thread_safetensors", "vllm_fastsafetensors"),
        "",
        "each engine installs the patched weights from its local copy itself (no vLLM checkpoint reload)",
    ),
    f"{ENGINE}.delta_weight_sync.multi_thread_safetensors_max_workers": Fixed(
        (8,), "choosing vLLM's checkpoint reload threads", "no vLLM checkpoint reload"
    ),
    f"{ENGINE}.vllm_v1_disable_multiproc": Fixed(
        (True, False), "", "inert, as upstream documents it: the engine actor runs vLLM either way"
    ),
    f"{ENGINE}.enable_chunked_prefill": Fixed(
        (True,),
        "turning off chunked prefill through this key",
        "vLLM's default (chunked prefill on)",
        f"{ENGINE}.engine_init_kwargs.enable_chunked_prefill=false (vllm backend)",
    ),
    f"{ENGINE}.max_num_batched_tokens": Fixed(
        (8192,),
        "setting vLLM's batched-token budget through this key",
        "vLLM's default budget",
        f"{ENGINE}.engine_init_kwargs.max_num_batched_tokens=N (vllm backend)",
    ),
    f"{ENGINE}.fully_sharded_loras": Fixed(
        OFF,
        "turning on vLLM's fully sharded LoRA kernels through this key",
        "off",
        f"{ENGINE}.engine_init_kwargs.fully_sharded_loras=true (vllm backend)",
    ),
    f"{ENGINE}.enable_return_routed_experts": Fixed(OFF, "routed-expert replay (R3)", "off"),
    f"{ENGINE}.enable_ray_prometheus_stats": Fixed(OFF, "the Ray Prometheus stats logger in the engines", "off"),
    f"{ENGINE}.offload_kv_for_weight_sync": Fixed(OFF, "offloading the KV cache during a weight sync", "off"),
    f"{ENGINE}.use_expandable_segments": Fixed(
        OFF,
        "setting the CUDA allocator of the engines",
        "the allocator the environment sets",
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before starting the run",
    ),
    f"{ENGINE}.served_model_name": Rename("generator.http_endpoint.served_model_name"),
    f"{ENGINE}.distributed_executor_backend": Fixed(
        ("ray", "mp"), "", "vLLM picks its executor inside each engine actor either way"
    ),
    f"{ENGINE}.language_model_only": Fixed((False, True), "", "engines serve the language model only either way"),
    f"{ENGINE}.speculative_config": Fixed(NONE, "speculative decoding", "off"),
    f"{ENGINE}.enable_pd": Fixed(OFF, "prefill/decode (PD) disaggregation", "off"),
    f"{ENGINE}.num_prefill": Ignored("prefill/decode (PD) disaggregation", f"{ENGINE}.enable_pd"),
    f"{ENGINE}.router_init_kwargs": Fixed(({},), "the vllm-router", "no router"),
    # ----- environment
    "environment.skyrl_gym": Rename("environment.env_configs"),
    "environment.skyrl_gym.max_env_workers": Rename("environment.max_env_workers"),
    # ----- per role
    **{key: rule for role in ROLES for key, rule in role_rules(role).items()},
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

PLUS_ADDED = ("trainer.algorithm.overlong_buffer.", "generator.retokenize_chat_history")
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
    f"{ENGINE}.weight_sync_backend": (
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
