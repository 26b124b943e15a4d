"""Every key of NovaSky-AI/SkyRL's config, both layouts, is this project's key or has a translation rule: none of
them is reported as an unknown key here. The keys are written here as data (the fields of SkyRL's current config
dataclasses and of its legacy YAML, plus the few its scripts add with `+`).
"""

from skyrl_train.config import SkyRLConfig, UnknownConfigKeyError
from skyrl_train.config.overrides import Override
from skyrl_train.config.upstream import _known, _rules_for, translate_overrides

SKYRL_KEYS = {
    "data.dataloader": "num_workers persistent_workers",
    "data": "train_data val_data",
    "environment": "env_class",
    "environment.skyrl_gym.llm_as_a_judge": "base_url model",
    "environment.skyrl_gym": "max_env_workers",
    "environment.skyrl_gym.search": "log_requests search_url timeout topk",
    "environment.skyrl_gym.text2sql": "db_path",
    "generator": (
        "append_eos_token_after_stop_str_in_multi_turn apply_overlong_filtering async_engine backend "
        "batched chat_template_kwargs enable_chunked_prefill enable_http_endpoint "
        "enable_prefix_caching enable_ray_prometheus_stats enforce_eager engine_init_kwargs "
        "eval_n_samples_per_prompt external_proxy_url external_server_urls fully_sharded_loras "
        "gpu_memory_utilization http_endpoint_host http_endpoint_port "
        "inference_engine_data_parallel_size inference_engine_expert_parallel_size "
        "inference_engine_pipeline_parallel_size inference_engine_tensor_parallel_size "
        "max_input_length max_num_batched_tokens max_num_seqs max_turns merge_stepwise_output "
        "model_dtype model_name n_samples_per_prompt num_inference_engines "
        "override_existing_update_group remote_inference_engine_urls retokenize_chat_history "
        "rope_scaling rope_theta run_engines_locally served_model_name step_wise_trajectories "
        "use_cache_salt use_conversation_multi_turn vision_language_generator "
        "vllm_v1_disable_multiproc weight_sync_backend weight_transfer_threshold_cuda_ipc_GB "
        "zero_reward_on_non_stop"
    ),
    "generator.chat_template": "name_or_path source",
    "generator.eval_sampling_params": (
        "additional_kwargs logprobs max_generate_length min_p " "repetition_penalty stop temperature top_k top_p"
    ),
    "generator.inference_engine": (
        "async_engine backend data_parallel_size delta_weight_sync "
        "distributed_executor_backend enable_chunked_prefill enable_pd "
        "enable_prefix_caching enable_ray_prometheus_stats "
        "enable_return_routed_experts enforce_eager engine_init_kwargs "
        "expert_parallel_size external_proxy_url external_server_urls "
        "fully_sharded_loras gpu_memory_utilization language_model_only "
        "max_num_batched_tokens max_num_seqs model_dtype num_engines num_prefill "
        "offload_kv_for_weight_sync pipeline_parallel_size router_init_kwargs "
        "run_engines_locally served_model_name speculative_config "
        "tensor_parallel_size use_expandable_segments vllm_v1_disable_multiproc "
        "weight_sync_backend weight_transfer_threshold_cuda_ipc_GB"
    ),
    "generator.inference_engine.delta_weight_sync": (
        "checkpoint_load_format cloud_download_workers local_checkpoint_dir max_file_size_in_gb "
        "multi_thread_safetensors_max_workers publish_num_workers publish_staging_dir sync_dir"
    ),
    "generator.rate_limit": "enabled max_concurrency trajectories_per_second",
    "generator.sampling_params": (
        "additional_kwargs logprobs max_generate_length min_p repetition_penalty " "stop temperature top_k top_p"
    ),
    "trainer.algorithm": (
        "advantage_batch_normalize advantage_estimator clip_ratio_c entropy_loss_coef "
        "eps_clip_high eps_clip_low gamma grpo_norm_by_std kl_estimator_type kl_loss_coef "
        "lambd loss_reduction max_seq_len overlong_buffer_len overlong_buffer_penalty_factor "
        "policy_loss_type temperature tis_imp_ratio_cap use_entropy_loss use_kl_in_reward "
        "use_kl_loss use_tis value_clip value_head_prefix zero_variance_filter "
        "zero_variance_filter_tol"
    ),
    "trainer.algorithm.cispo": "cispo_anchor cispo_eps_clip_high cispo_eps_clip_low",
    "trainer.algorithm.clip_cov": "clip_cov_lb clip_cov_ub clip_ratio",
    "trainer.algorithm.dppo": "delta_high delta_low dppo_type",
    "trainer.algorithm.dynamic_sampling": "max_sample_batches min_replace_ratio type",
    "trainer.algorithm.kl_cov": "kl_cov_frac ppo_kl_coef",
    "trainer.algorithm.kl_ctrl": "horizon kl_target type",
    "trainer.algorithm.off_policy_correction": (
        "geo_mask_high geo_mask_low outlier_token_is_threshold_high "
        "outlier_token_is_threshold_low product_mask_high "
        "product_mask_low sequence_mask_metric "
        "sequence_tis_ratio_clip_high tis_ratio_type "
        "token_mask_is_threshold_high token_mask_is_threshold_low "
        "token_tis_ratio_clip_high"
    ),
    "trainer.algorithm.overlong_buffer": "len penalty_factor",
    "trainer.algorithm.sapo": "tau_neg tau_pos",
    "trainer": (
        "bf16 ckpt_interval ckpt_path critic_mini_batch_size disable_fast_tokenizer dump_data_batch "
        "dump_eval_results enable_ray_gpu_monitor epochs eval_batch_size eval_before_train "
        "eval_interval export_path flash_attn fused_lm_head_logprob fused_lm_head_logprob_backend "
        "gradient_checkpointing gradient_checkpointing_use_reentrant hf_save_interval "
        "log_example_interval log_path logger logprobs_chunk_size max_ckpts_to_keep max_prompt_length "
        "max_tokens_per_microbatch max_training_steps micro_forward_batch_size_per_gpu "
        "micro_train_batch_size_per_gpu num_logger_eval_samples num_logger_train_samples "
        "policy_mini_batch_size print_example_interval project_name "
        "recompute_old_logprobs_per_minibatch resume_mode resume_path rope_scaling rope_theta run_name "
        "seed sequence_parallel_backend strategy tags train_batch_size update_epochs_per_batch "
        "update_ref_every_epoch use_expandable_segments use_sample_packing remove_microbatch_padding "
        "vocab_entropy_chunk_memory_mb vocab_entropy_chunk_size"
    ),
    "trainer.critic.fsdp_config": "cpu_offload fsdp_size mixed_precision reshard_after_forward wrap_policy",
    "trainer.critic.model.fake_int4_qat": "bf16_base_path enabled group_size q_min scale_divisor symmetric",
    "trainer.critic.model.lora": (
        "alpha dropout exclude_modules init_method lora_sync_path max_cpu_loras " "max_loras rank target_modules"
    ),
    "trainer.critic.model": "path",
    "trainer.critic": "model_config_kwargs sequence_parallel_size",
    "trainer.critic.optimizer_config": (
        "adam_betas lr max_grad_norm num_warmup_steps offload_after_step " "scheduler weight_decay"
    ),
    "trainer.fully_async": (
        "clear_kv_cache_on_weight_sync enabled max_staleness_steps "
        "num_parallel_generation_workers sample_full_batch simulate_training "
        "simulate_training_step_seconds simulate_weight_sync_seconds"
    ),
    "trainer.mtp": "enabled loss_weight num_speculative_tokens",
    "trainer.placement": (
        "colocate_all colocate_policy_ref critic_num_gpus_per_node critic_num_nodes "
        "policy_num_gpus_per_node policy_num_nodes ref_num_gpus_per_node ref_num_nodes"
    ),
    "trainer.policy.fsdp_config": "cpu_offload fsdp_size mixed_precision reshard_after_forward wrap_policy",
    "trainer.policy": (
        "inference_only_init language_model_only model_config_kwargs record_memory "
        "sequence_parallel_size use_torch_compile"
    ),
    "trainer.policy.megatron_config": (
        "async_dist_ckpt_save async_dist_ckpt_strategy "
        "async_save_prestage_to_cpu context_parallel_size "
        "dist_ckpt_optim_fully_reshardable empty_cuda_cache "
        "expert_model_parallel_size expert_tensor_parallel_size "
        "freeze_moe_router model_config_kwargs moe_aux_loss_coeff "
        "moe_enable_routing_replay moe_grouped_gemm moe_per_layer_logging "
        "moe_router_dtype moe_router_enable_expert_bias "
        "moe_router_load_balancing_type moe_router_score_function "
        "moe_token_dispatcher_type mtp_loss_chunk_size mtp_loss_topk "
        "mtp_loss_weight mtp_num_layers optimizer_config_kwargs "
        "pipeline_model_parallel_size tensor_model_parallel_size "
        "transformer_config_kwargs"
    ),
    "trainer.policy.megatron_config.ddp_config": (
        "average_in_collective grad_reduce_in_fp32 " "overlap_grad_reduce overlap_param_gather"
    ),
    "trainer.policy.megatron_config.hf_export_config": "distributed_save save_every_n_ranks",
    "trainer.policy.megatron_config.lora_config": "lora_type merge_lora",
    "trainer.policy.megatron_config.optimizer_config_kwargs": (
        "optimizer_cpu_offload "
        "optimizer_offload_fraction "
        "overlap_cpu_optimizer_d2h_h2d "
        "use_precision_aware_optimizer"
    ),
    "trainer.policy.megatron_config.torch_profiler_config": "enable ranks save_path",
    "trainer.policy.megatron_config.transformer_config_kwargs": (
        "moe_router_score_function "
        "num_layers_in_last_pipeline_stage "
        "recompute_granularity recompute_method "
        "recompute_modules recompute_num_layers"
    ),
    "trainer.policy.model.fake_int4_qat": "bf16_base_path enabled group_size q_min scale_divisor symmetric",
    "trainer.policy.model.lora": (
        "alpha dropout exclude_modules init_method lora_sync_path max_cpu_loras " "max_loras rank target_modules"
    ),
    "trainer.policy.model": "path",
    "trainer.policy.optimizer_config": (
        "adam_betas lr max_grad_norm num_warmup_steps offload_after_step " "scheduler weight_decay"
    ),
    "trainer.policy.torch_profiler_config": (
        "active activities enable export_type profile_memory ranks "
        "record_shapes repeat save_path skip_first wait warmup with_flops "
        "with_modules with_stack"
    ),
    "trainer.ref.fsdp_config": "cpu_offload fsdp_size mixed_precision reshard_after_forward wrap_policy",
    "trainer.ref": "language_model_only model_config_kwargs sequence_parallel_size",
    "trainer.ref.megatron_config": (
        "async_dist_ckpt_save async_dist_ckpt_strategy async_save_prestage_to_cpu "
        "context_parallel_size dist_ckpt_optim_fully_reshardable empty_cuda_cache "
        "expert_model_parallel_size expert_tensor_parallel_size freeze_moe_router "
        "model_config_kwargs moe_aux_loss_coeff moe_enable_routing_replay "
        "moe_grouped_gemm moe_per_layer_logging moe_router_dtype "
        "moe_router_enable_expert_bias moe_router_load_balancing_type "
        "moe_router_score_function moe_token_dispatcher_type mtp_loss_chunk_size "
        "mtp_loss_topk mtp_loss_weight mtp_num_layers optimizer_config_kwargs "
        "pipeline_model_parallel_size tensor_model_parallel_size "
        "transformer_config_kwargs"
    ),
    "trainer.ref.megatron_config.ddp_config": (
        "average_in_collective grad_reduce_in_fp32 overlap_grad_reduce " "overlap_param_gather"
    ),
    "trainer.ref.megatron_config.hf_export_config": "distributed_save save_every_n_ranks",
    "trainer.ref.megatron_config.lora_config": "lora_type merge_lora",
    "trainer.ref.megatron_config.optimizer_config_kwargs": (
        "optimizer_cpu_offload optimizer_offload_fraction "
        "overlap_cpu_optimizer_d2h_h2d "
        "use_precision_aware_optimizer"
    ),
    "trainer.ref.megatron_config.torch_profiler_config": "enable ranks save_path",
    "trainer.ref.megatron_config.transformer_config_kwargs": (
        "recompute_granularity recompute_method " "recompute_modules recompute_num_layers"
    ),
    "trainer.ref.model.fake_int4_qat": "bf16_base_path enabled group_size q_min scale_divisor symmetric",
    "trainer.ref.model.lora": (
        "alpha dropout exclude_modules init_method lora_sync_path max_cpu_loras " "max_loras rank target_modules"
    ),
    "trainer.ref.model": "path",
}
"""Section -> its keys (space-separated)."""

KEYS = [f"{section}.{name}" for section, names in SKYRL_KEYS.items() for name in names.split()]


def test_every_skyrl_key_is_ours_or_has_a_rule():
    assert len(KEYS) > 400
    orphans = [key for key in KEYS if _known(SkyRLConfig, key) is None and _rules_for(key) is None]
    assert not orphans


def test_no_skyrl_key_is_reported_as_unknown_whatever_its_value():
    for value in (None, "x"):
        translation = translate_overrides([Override(key, value, "set", f"{key}={value!r}") for key in KEYS])
        unknown = [problem for problem in translation.problems if isinstance(problem, UnknownConfigKeyError)]
        assert not unknown, (value, unknown)
