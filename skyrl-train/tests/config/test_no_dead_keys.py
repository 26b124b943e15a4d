"""No dead config keys: every leaf of `SkyRLConfig` is either shown to change behaviour by named tests, or listed as
not supported yet (refused by validation, shown in the docs).

EVIDENCE maps a key (or an fnmatch pattern of keys) to the tests that fail when the code ignores it: usually a test
that the key reaches what the run builds (settings, engine params, loss config, ...) and a test of what that value
does there. Each was checked by reading the code that reads the key. NOT_YET_SUPPORTED lives in
`skyrl_train.config.unsupported`. PENDING_EVIDENCE holds keys whose code is being changed on other branches; their
owners' tests fill it in at merge, and the set must then be empty.
"""

import ast
import fnmatch
from functools import cache
from pathlib import Path

import pytest

from skyrl_train.config import ConfigValidationError, SkyRLConfig
from skyrl_train.config.errors import UnsupportedFeatureError
from skyrl_train.config.overrides import Override
from skyrl_train.config.typecheck import is_free_mapping, iter_fields
from skyrl_train.config.unsupported import NOT_YET_SUPPORTED
from skyrl_train.config.upstream import same_value, translate_overrides
from skyrl_train.config.upstream_keys import RULES, VALUE_RULES, Fixed, Ignored, Refuse, Rename, Replace

TESTS = Path(__file__).resolve().parents[1]
DOCS = TESTS.parents[1] / "docs" / "reference" / "configuration.md"

_MAIN_BASE = "entrypoints/test_main_base.py"
_DATA_KEYS = f"{_MAIN_BASE}::test_data_keys_reach_the_datasets_and_the_loader"
_COLUMNS = f"{_MAIN_BASE}::test_custom_columns_and_the_default_env_class"
_PLACEMENT = "test_placement.py::test_cpus_needed_follows_the_placement_keys"
_THREADS = "utils/test_threads.py::test_thread_counts_default_to_the_cpu_share_and_follow_their_keys"
_THREADS_IN_ACTORS = "trainer/test_trainer_runs.py::test_one_step_per_estimator_trains_and_syncs"
_POLICY_SECTION = "workers/test_policy_worker.py::test_each_role_builds_from_its_own_section"
_CRITIC_SECTION = "workers/test_critic_worker.py::test_the_critic_builds_from_its_own_section"
_ADAMW = "workers/strategy/test_optimizer.py::test_adamw_takes_lr_betas_and_weight_decay_and_skips_frozen_parameters"
_WARMUP = "workers/strategy/test_optimizer.py::test_linear_warmup_then_cosine_decay_by_hand"
_ADVANTAGES = "trainer/test_trainer_phases.py::test_advantages_follow_the_estimator_and_its_settings"
_OBJECTIVE = "workers/test_policy_objective.py::test_settings_take_config_values_and_per_call_overrides"
_KL_ENTROPY = "workers/test_policy_objective.py::test_kl_loss_entropy_bonus_and_rollout_difference"
_LOSS_FIELDS = "algorithms/test_policy_loss_config_from_algorithm.py::test_every_loss_key_of_the_algorithm_section_reaches_its_loss_field"
_RUN_KEYS = "trainer/test_trainer_keys.py::test_eval_checkpoint_export_and_logging_keys"
_ENGINE_KEYS = "inference/test_ray_engine.py::test_every_engine_key_reaches_the_engine_settings"
_HF_BUILDER = "inference/test_ray_engine.py::test_hf_builder_takes_dtype_batch_size_and_engine_kwargs"
_SAMPLING_KEYS = "generators/test_from_config.py::test_every_sampling_key_reaches_the_engine_params"
_GENERATOR_KEYS = (
    "generators/test_from_config.py::test_every_generator_and_environment_key_reaches_the_generator_settings"
)
_ENDPOINT = "trainer/test_trainer_endpoint.py::test_the_endpoint_serves_whole_weight_versions_while_the_policy_trains"
_ENDPOINT_ACCESS = f"{_MAIN_BASE}::test_the_endpoint_keys_reach_the_served_app"
_LORA_ONLY_ADAPTERS = "workers/test_lora_worker.py::test_lora_trains_only_the_adapters_and_the_base_stays_the_reference"
_LORA_KEYS = "workers/test_lora_worker.py::test_lora_keys_reach_the_adapters"
_LORA_EXPORT = "workers/test_lora_worker.py::test_lora_export_writes_the_adapter_and_the_merged_model"
_NAMES = "config/test_registered_names.py::test_each_unregistered_name_is_named_with_its_close_matches"
_DELTA_KEYS = "weight_sync/test_delta.py::test_skyrls_delta_keys_reach_the_strategy_and_are_checked"
_GENERATOR = "generators/test_skyrl_gym_generator.py"
_HF = "inference/test_hf_engine.py"
_SAMPLING = "inference/test_sampling.py"
_LOSSES = "algorithms/test_policy_losses.py"
_OFF_POLICY = "algorithms/test_off_policy.py"
_COVARIANCE = "algorithms/test_covariance_losses.py"
_AUTO_CPU = "config/test_auto_settings.py::test_a_small_model_on_cpu_gets_the_quickstart_speed_settings"
_AUTO_GPU = "config/test_auto_settings.py::test_gpu_defaults_stay_gpu_defaults"

EVIDENCE: dict[str, tuple[str, ...]] = {
    # data: what the datasets and the loader read (BasePPOExp.prepare, no Ray)
    "data.train_data": (_DATA_KEYS,),
    "data.val_data": (_DATA_KEYS,),
    "data.max_prompt_length": (
        _DATA_KEYS,
        "dataset/test_prompt_dataset.py::test_long_prompts_are_dropped_counted_and_logged_never_truncated",
    ),
    "data.prompt_key": (_COLUMNS,),
    "data.env_class_key": (_COLUMNS,),
    "data.shuffle": (_DATA_KEYS, "dataset/test_dataloader.py::test_no_shuffle_keeps_dataset_order"),
    "data.seed": (
        _DATA_KEYS,
        "dataset/test_dataloader.py::test_same_seed_same_order_regardless_of_global_random_state",
    ),
    # placement
    "trainer.placement.colocate_all": (
        _PLACEMENT,
        "trainer/test_trainer_runs.py::test_separate_placement_with_broadcast_sync",
    ),
    "trainer.placement.colocate_policy_ref": (_PLACEMENT,),
    "trainer.placement.*_num_nodes": (
        _PLACEMENT,
        "config/test_validation.py::test_data_parallel_size_divides_by_sequence_parallelism",
    ),
    "trainer.placement.*_num_gpus_per_node": (
        _PLACEMENT,
        "config/test_validation.py::test_each_check_triggers_with_its_message",
    ),
    "trainer.placement.num_cpus_per_worker": (_PLACEMENT,),
    "trainer.placement.num_threads_per_worker": (_THREADS, _THREADS_IN_ACTORS),
    "trainer.placement.ray_address": ("test_placement.py::test_ray_address_joins_a_cluster_instead_of_starting_one",),
    "trainer.device": ("config/test_root.py::test_resolved_device_keeps_an_explicit_choice", _HF_BUILDER),
    # roles: model paths, optimizers, FSDP, memory savers
    "trainer.policy.model.path": ("workers/test_policy_worker.py::test_forward_matches_a_plain_hf_forward",),
    "trainer.placement.allocation_mode": (
        "config/test_allocation.py::test_separate_vllm_and_fsdp",
        "config/test_allocation.py::test_megatron_tensor_parallelism",
    ),
    "generator.workflow": (
        "generators/test_workflow.py::test_the_config_selects_a_registered_workflow",
        "trainer/test_trainer_async.py::test_a_registered_workflow_trains_in_fully_async_mode",
    ),
    "generator.workflow_args": ("generators/test_workflow.py::test_workflow_args_reach_the_workflows_constructor",),
    "trainer.mode": (
        "trainer/test_trainer_async.py::test_one_step_off_trains_on_data_at_most_one_version_old",
        "trainer/test_trainer_async.py::test_fully_async_staleness_stays_within_its_bound",
    ),
    "trainer.async_rl.max_staleness": (
        "trainer/test_trainer_async.py::test_fully_async_staleness_stays_within_its_bound",
    ),
    "trainer.async_rl.weight_update_boundary": (
        "inference/test_ray_engine.py::test_the_weight_update_boundary_reaches_the_hf_engine",
        "inference/test_hf_decode.py::test_an_in_flight_update_lands_between_two_tokens_and_each_token_keeps_its_version_and_logprob",
    ),
    "trainer.policy.model.lora.rank": (
        _LORA_ONLY_ADAPTERS,
        "trainer/test_trainer_lora.py::test_lora_run_syncs_adapters_uses_the_base_as_reference_and_resumes_exactly",
        "inference/test_ray_engine.py::test_every_engine_key_reaches_the_engine_settings",
    ),
    "trainer.policy.model.lora.alpha": (
        _LORA_KEYS,
        _LORA_EXPORT,
        "models/test_lora_state.py::test_merge_matches_peft_merge_and_unload",
    ),
    "trainer.policy.model.lora.dropout": (_LORA_KEYS,),
    "trainer.policy.model.lora.target_modules": (_LORA_KEYS,),
    "trainer.policy.model.lora.exclude_modules": (_LORA_KEYS,),
    "trainer.policy.model.lora.merge_on_export": (_LORA_EXPORT,),
    "trainer.critic.model.lora.rank": (
        "workers/test_critic_worker.py::test_critic_lora_trains_the_adapters_and_the_value_head_only",
        "workers/test_critic_worker.py::test_critic_lora_checkpoint_resumes_exactly",
    ),
    **{
        f"trainer.critic.model.lora.{name}": (
            "workers/test_critic_worker.py::test_critic_lora_keys_reach_the_adapters",
        )
        for name in ("alpha", "dropout", "target_modules", "exclude_modules")
    },
    "trainer.ref.model.path": ("config/test_root.py::test_derived_lengths_and_paths",),
    "trainer.critic.model.path": (
        "config/test_root.py::test_needs_critic_follows_the_critic_model_path",
        "trainer/test_trainer_runs.py::test_one_step_per_estimator_trains_and_syncs",
    ),
    "trainer.policy.optimizer.lr": (_POLICY_SECTION, _ADAMW),
    "trainer.policy.optimizer.adam_betas": (_POLICY_SECTION, _ADAMW),
    "trainer.policy.optimizer.weight_decay": (_POLICY_SECTION, _ADAMW),
    "trainer.critic.optimizer.lr": (_CRITIC_SECTION, _ADAMW),
    "trainer.critic.optimizer.adam_betas": (_CRITIC_SECTION, _ADAMW),
    "trainer.critic.optimizer.weight_decay": (_CRITIC_SECTION, _ADAMW),
    "trainer.*.optimizer.max_grad_norm": (
        "workers/strategy/test_fsdp2.py::test_max_grad_norm_clips_the_update",
        _POLICY_SECTION,
        _CRITIC_SECTION,
    ),
    "trainer.policy.optimizer.scheduler": (
        "workers/test_policy_worker.py::test_warmup_schedule_and_scheduler_errors",
        _WARMUP,
        _NAMES,
    ),
    "trainer.policy.optimizer.num_warmup_steps": (
        "workers/test_policy_worker.py::test_warmup_schedule_and_scheduler_errors",
        _WARMUP,
    ),
    "trainer.critic.optimizer.scheduler": (_CRITIC_SECTION, _WARMUP),
    "trainer.critic.optimizer.num_warmup_steps": (_CRITIC_SECTION, _WARMUP),
    "reward.model.fsdp.*": (
        "workers/strategy/test_fsdp2.py::test_fsdp_section_sets_the_shard_options",
        "workers/test_reward_worker.py::test_bf16_compute_dtype_changes_scores_only_by_rounding",
        "workers/strategy/test_fsdp2.py::test_a_strategy_given_auto_chooses_when_it_shards",
    ),
    "trainer.strategy": (
        "workers/strategy/test_megatron.py::test_on_a_machine_without_cuda_the_strategy_refuses_to_start",
        "config/test_megatron_validation.py::test_a_tp2_run_on_four_gpus_is_valid_and_has_two_data_parallel_ranks",
    ),
    "trainer.*.megatron.tensor_model_parallel_size": (
        "config/test_megatron_validation.py::test_a_tp2_run_on_four_gpus_is_valid_and_has_two_data_parallel_ranks",
        "workers/test_dispatch.py::test_tensor_parallel_ranks_share_a_data_parallel_shard",
        "workers/strategy/test_megatron.py::test_converted_weights_load_into_megatron_gpt_model",
    ),
    "trainer.*.megatron.expert_model_parallel_size": (
        "config/test_megatron_validation.py::test_expert_parallel_size_must_divide_the_data_parallel_ranks",
        "models/test_megatron_convert.py::test_moe_round_trips_and_shards_over_experts",
    ),
    "trainer.*.megatron.param_dtype": (
        "workers/strategy/test_megatron.py::test_param_dtype_sets_megatron_precision",
        "workers/strategy/test_megatron_gpu.py::test_logits_match_the_hf_model_and_a_step_moves_the_weights",
    ),
    "trainer.*.fsdp.*": (
        "workers/strategy/test_fsdp2.py::test_fsdp_section_sets_the_shard_options",
        "workers/strategy/test_fsdp2.py::test_fsdp_size_must_divide_the_world",
        "workers/test_policy_worker.py::test_bf16_mixed_precision_trains_with_float32_master_weights",
        _POLICY_SECTION,
        _CRITIC_SECTION,
        _AUTO_CPU,
        _AUTO_GPU,
        "workers/strategy/test_fsdp2.py::test_a_strategy_given_auto_chooses_when_it_shards",
    ),
    "trainer.*.gradient_checkpointing": (
        _POLICY_SECTION,
        _CRITIC_SECTION,
        "workers/test_policy_worker.py::test_gradient_checkpointing_keeps_the_gradient",
        _AUTO_CPU,
        _AUTO_GPU,
    ),
    # algorithm
    "trainer.algorithm.advantage_estimator": (
        _ADVANTAGES,
        _NAMES,
        "trainer/test_trainer_runs.py::test_one_step_per_estimator_trains_and_syncs",
    ),
    "trainer.algorithm.gamma": (_ADVANTAGES,),
    "trainer.algorithm.lambd": (_ADVANTAGES,),
    "trainer.algorithm.grpo_norm_by_std": (_ADVANTAGES,),
    "trainer.algorithm.grpo_std_epsilon": (_ADVANTAGES,),
    "trainer.algorithm.policy_loss_type": (
        _OBJECTIVE,
        _NAMES,
        "workers/test_group.py::test_user_registered_loss_reaches_the_workers",
    ),
    "trainer.algorithm.use_kl_loss": (_KL_ENTROPY, "config/test_root.py::test_needs_ref_model_follows_kl_settings"),
    "trainer.algorithm.kl_loss_coef": (_KL_ENTROPY,),
    "trainer.algorithm.kl_estimator_type": (_OBJECTIVE, "algorithms/test_kl.py::test_estimators"),
    "trainer.algorithm.use_entropy_loss": (_KL_ENTROPY,),
    "trainer.algorithm.entropy_loss_coef": (_KL_ENTROPY,),
    "trainer.algorithm.eps_clip_*": (_LOSS_FIELDS, f"{_LOSSES}::test_regular_ppo_with_clip_higher"),
    "trainer.algorithm.clip_ratio_c": (_LOSS_FIELDS, f"{_LOSSES}::test_dual_clip_caps_negative_advantage_tokens"),
    "trainer.algorithm.max_seq_len": (_LOSS_FIELDS, f"{_LOSSES}::test_regular_ppo_under_each_reduction"),
    "trainer.algorithm.value_clip": (
        "workers/test_critic_worker.py::test_value_loss_updates_move_values_toward_returns",
        "algorithms/test_value_loss.py::test_clipped_value_loss_takes_the_larger_error",
    ),
    "trainer.algorithm.off_policy_correction.*": (
        _LOSS_FIELDS,
        f"{_OFF_POLICY}::test_combined_correction_multiplies_tis_and_mask",
        f"{_OFF_POLICY}::test_geometric_mask_rejects_sequences_outside_the_band",
        f"{_OFF_POLICY}::test_product_mask_rejects_sequences_outside_the_band",
        f"{_OFF_POLICY}::test_sequence_tis_uses_the_capped_product_ratio",
        f"{_LOSSES}::test_token_tis_weights_the_per_token_loss",
    ),
    "trainer.algorithm.cispo.*": (
        _LOSS_FIELDS,
        f"{_LOSSES}::test_cispo_keeps_gradient_on_clipped_tokens_through_a_detached_weight",
        f"{_LOSSES}::test_cispo_rollout_anchor_uses_rollout_log_probs",
    ),
    "trainer.algorithm.sapo.*": (_LOSS_FIELDS, f"{_LOSSES}::test_sapo_soft_gate_value_and_gradient"),
    "trainer.algorithm.clip_cov.*": (
        _LOSS_FIELDS,
        f"{_COVARIANCE}::test_clip_cov_detaches_selected_tokens_but_keeps_the_loss_value",
        f"{_COVARIANCE}::test_clip_cov_bounds_exclude_tokens_outside_them",
    ),
    "trainer.algorithm.kl_cov.*": (_LOSS_FIELDS, f"{_COVARIANCE}::test_kl_cov_penalises_the_top_covariance_token"),
    # the loop: steps, batches, checkpoints, logging, evaluation
    "trainer.seed": (
        "workers/test_critic_worker.py::test_values_come_from_the_head_at_the_position_before_each_token",
        _ENGINE_KEYS,
    ),
    "trainer.epochs": (
        "trainer/test_total_steps.py::test_cap_shortens_but_never_extends_the_run",
        f"{_MAIN_BASE}::test_a_step_cap_beyond_the_epochs_is_reported_at_start_up",
    ),
    "trainer.max_training_steps": (
        "trainer/test_total_steps.py::test_cap_shortens_but_never_extends_the_run",
        f"{_MAIN_BASE}::test_a_step_cap_beyond_the_epochs_is_reported_at_start_up",
        _RUN_KEYS,
    ),
    "trainer.update_epochs_per_batch": (
        "trainer/test_total_steps.py::test_optimizer_steps_per_training_step_counts_mini_batches_and_ppo_epochs",
    ),
    "trainer.train_batch_size": (
        _DATA_KEYS,
        "trainer/test_total_steps.py::test_optimizer_steps_per_training_step_counts_mini_batches_and_ppo_epochs",
    ),
    "trainer.*_mini_batch_size": (
        "trainer/test_trainer_phases.py::test_mini_batches_follow_the_role_mini_batch_sizes",
        "trainer/test_total_steps.py::test_optimizer_steps_per_training_step_counts_mini_batches_and_ppo_epochs",
    ),
    "trainer.micro_train_batch_size_per_gpu": (
        "workers/test_policy_worker.py::test_micro_batches_give_the_whole_batch_gradient",
        "config/test_auto_settings.py::test_the_micro_batch_divides_the_shard_and_fits_the_budget",
    ),
    "trainer.micro_forward_batch_size_per_gpu": (
        "workers/test_policy_worker.py::test_forward_matches_a_plain_hf_forward",
        _AUTO_CPU,
    ),
    "trainer.share_prompt_forward": (
        "workers/test_policy_worker.py::test_shared_prompt_forward_keeps_logprobs_and_gradient",
        "models/test_logprobs.py::test_each_distinct_prompt_runs_once",
    ),
    "trainer.max_tokens_per_microbatch": (
        "workers/test_micro_batching.py::test_micro_batch_groups_switches_on_token_budget",
        "workers/test_micro_batching.py::test_micro_batch_groups_count_packed_tokens_when_packing",
    ),
    "trainer.remove_microbatch_padding": (
        "workers/test_worker_packing.py::test_the_policy_runs_packed_sequences_with_the_padded_logprobs_loss_and_gradients",
        "workers/test_worker_packing.py::test_the_ref_and_the_critic_pack_too",
        "workers/test_worker_packing.py::test_a_model_that_cannot_pack_runs_padded_on_auto_and_fails_on_true",
        "config/test_megatron_validation.py::test_sequence_packing_is_refused_on_megatron_only_when_insisted_on",
    ),
    "trainer.ckpt_path": (
        _RUN_KEYS,
        "trainer/test_trainer_resume.py::test_corrupt_newest_checkpoint_falls_back_to_previous",
    ),
    "trainer.ckpt_interval": (
        _RUN_KEYS,
        "trainer/test_trainer_resume.py::test_corrupt_newest_checkpoint_falls_back_to_previous",
    ),
    "trainer.max_ckpts_to_keep": (
        _RUN_KEYS,
        "utils/test_checkpoint_io.py::test_prune_keeps_newest_n_valid_and_removes_leftovers",
    ),
    "trainer.resume_mode": (
        "trainer/test_trainer_resume.py::test_resumed_run_matches_uninterrupted_run",
        "utils/test_checkpoint_io.py::test_resolve_resume_modes",
    ),
    "trainer.resume_path": ("utils/test_checkpoint_io.py::test_resolve_resume_modes",),
    "trainer.hf_save_interval": (_RUN_KEYS,),
    "trainer.export_path": (_RUN_KEYS,),
    "generator.use_conversation_multi_turn": (
        _GENERATOR_KEYS,
        "generators/test_single_message_turns.py::test_turns_and_observations_share_one_assistant_message",
        "generators/test_single_message_turns.py::test_the_default_renders_each_observation_as_a_chat_message",
    ),
    "trainer.dump_data_batch": (
        "utils/test_batch_dump.py::test_the_dumped_file_holds_the_batch_and_its_step_tensors",
        "utils/test_batch_dump.py::test_nothing_is_written_when_the_key_is_off",
        "trainer/test_trainer_runs.py::test_one_step_per_estimator_trains_and_syncs",
    ),
    "trainer.logger": (_RUN_KEYS, _NAMES),
    "trainer.project_name": (_RUN_KEYS,),
    "trainer.run_name": (_RUN_KEYS,),
    "trainer.log_path": (_RUN_KEYS,),
    "trainer.record_timeline": (
        _RUN_KEYS,
        "utils/test_timeline.py::test_the_run_timeline_writes_each_steps_spans_and_draws_them",
    ),
    "trainer.eval_interval": (_RUN_KEYS,),
    "trainer.eval_before_train": (_RUN_KEYS,),
    "trainer.eval_batch_size": (
        _RUN_KEYS,
        "test_evaluation.py::test_batches_of_batch_size_prompts_give_the_same_metrics_and_dump",
    ),
    # engines
    "generator.inference_engine.backend": (
        _ENGINE_KEYS,
        _NAMES,
        "trainer/test_trainer_vllm.py::test_two_steps_with_vllm_engines",
    ),
    "generator.inference_engine.num_threads": (_THREADS, _THREADS_IN_ACTORS),
    "generator.inference_engine.remote_urls": (
        "trainer/test_trainer_remote.py::test_training_through_our_own_server",
        "inference/test_ray_engine.py::test_every_engine_key_reaches_the_engine_settings",
    ),
    "generator.inference_engine.num_engines": (
        _PLACEMENT,
        "trainer/test_trainer_vllm.py::test_two_steps_with_vllm_engines",
    ),
    "generator.http_endpoint.enabled": (_ENDPOINT,),
    "generator.http_endpoint.host": (_ENDPOINT,),
    "generator.http_endpoint.port": (_ENDPOINT,),
    "generator.http_endpoint.served_model_name": (_ENDPOINT,),
    "generator.http_endpoint.api_key_env": (
        _ENDPOINT_ACCESS,
        "serving/test_access.py::test_a_runs_endpoint_reads_its_key_from_the_named_variable",
    ),
    "generator.http_endpoint.max_request_mb": (
        _ENDPOINT_ACCESS,
        "serving/test_access.py::test_a_runs_endpoint_reads_its_key_from_the_named_variable",
    ),
    "generator.inference_engine.weight_sync_backend": (
        _NAMES,
        "weight_sync/test_chunks.py::test_strategy_names_resolve_and_unknown_names_are_listed",
        "trainer/test_trainer_runs.py::test_separate_placement_with_broadcast_sync",
    ),
    "generator.inference_engine.delta_weight_sync.*": (
        _DELTA_KEYS,
        "weight_sync/test_delta.py::test_a_full_version_then_xor_deltas_reach_the_engine_bit_for_bit",
        "weight_sync/test_delta.py::test_file_size_staging_and_a_new_layout",
        "weight_sync/test_strategies.py::test_the_run_config_builds_the_delta_strategy_with_its_folder",
    ),
    "generator.inference_engine.model_dtype": (_ENGINE_KEYS, _HF_BUILDER, _AUTO_GPU),
    "generator.inference_engine.max_num_seqs": (_ENGINE_KEYS, _HF_BUILDER),
    "generator.inference_engine.engine_init_kwargs": (_ENGINE_KEYS, _HF_BUILDER),
    "generator.inference_engine.tensor_parallel_size": (
        _ENGINE_KEYS,
        "config/test_validation.py::test_each_check_triggers_with_its_message",
        "test_placement.py::test_each_rank_of_a_tensor_parallel_vllm_engine_gets_a_gpu_of_its_own",
    ),
    "generator.inference_engine.gpu_memory_utilization": (_ENGINE_KEYS,),
    "generator.inference_engine.enable_prefix_caching": (_ENGINE_KEYS,),
    "generator.inference_engine.enforce_eager": (_ENGINE_KEYS,),
    # sampling (training and evaluation share the builder; evaluation's reach the eval rollouts)
    "generator.*sampling_params.max_generate_length": (
        _SAMPLING_KEYS,
        f"{_HF}::test_stop_token_ids_stop_strings_and_length",
    ),
    "generator.*sampling_params.temperature": (
        _SAMPLING_KEYS,
        f"{_SAMPLING}::test_sampled_logprob_is_under_temperature_scaled_distribution",
    ),
    "generator.*sampling_params.top_p": (
        _SAMPLING_KEYS,
        f"{_SAMPLING}::test_top_p_keeps_the_smallest_nucleus_reaching_p",
    ),
    "generator.*sampling_params.top_k": (_SAMPLING_KEYS, f"{_SAMPLING}::test_top_k_keeps_the_k_largest"),
    "generator.*sampling_params.min_p": (
        _SAMPLING_KEYS,
        f"{_SAMPLING}::test_min_p_drops_tokens_below_fraction_of_the_best",
    ),
    "generator.*sampling_params.repetition_penalty": (
        _SAMPLING_KEYS,
        f"{_HF}::test_repetition_penalty_follows_the_rule_on_prompt_and_generated_tokens",
        "inference/test_vllm_engine.py::test_repetition_penalty_follows_the_rule_like_the_hf_engine",
    ),
    "generator.*sampling_params.stop": (_SAMPLING_KEYS, f"{_HF}::test_stop_token_ids_stop_strings_and_length"),
    "generator.*sampling_params.logprobs": (
        "generators/test_from_config.py::test_logprobs_null_zero_and_k",
        f"{_HF}::test_top_logprobs_equal_topk_of_a_plain_forward",
        f"{_GENERATOR}::test_top_logprobs_ride_on_the_trajectory_aligned_with_its_tokens",
    ),
    "generator.*sampling_params.seed": (
        _SAMPLING_KEYS,
        f"{_HF}::test_seeded_requests_sample_the_same_tokens_alone_or_batched",
        "trainer/test_trainer_phases.py::test_rollout_input_repeats_prompts_and_seeds_rows_from_the_sampling_seed",
    ),
    "generator.*sampling_params.additional_kwargs": (
        _SAMPLING_KEYS,
        f"{_HF}::test_additional_kwargs_are_refused_by_name",
        "inference/test_vllm_engine.py::test_additional_kwargs_reach_vllm_and_bad_ones_are_named",
    ),
    "generator.eval_sampling_params.*": (_RUN_KEYS,),
    # rollouts and environments
    "generator.n_samples_per_prompt": (
        "trainer/test_trainer_phases.py::test_rollout_input_repeats_prompts_and_seeds_rows_from_the_sampling_seed",
        _RUN_KEYS,
    ),
    "generator.eval_n_samples_per_prompt": (_RUN_KEYS,),
    "generator.max_turns": (_GENERATOR_KEYS, f"{_GENERATOR}::test_multi_turn_is_token_in_token_out_without_drift"),
    "generator.batched": (
        _GENERATOR_KEYS,
        f"{_GENERATOR}::test_single_turn_real_env_metrics_and_batched_mode_agree",
        "config/test_auto_settings.py::test_batched_generation_only_for_single_turn_env_rollouts",
    ),
    "generator.max_input_length": (
        _GENERATOR_KEYS,
        f"{_GENERATOR}::test_context_over_max_input_length_ends_a_multi_turn_trajectory",
    ),
    "generator.step_wise_trajectories": (_GENERATOR_KEYS, f"{_GENERATOR}::test_step_wise_trajectories_one_per_turn"),
    "generator.apply_overlong_filtering": (
        _GENERATOR_KEYS,
        f"{_GENERATOR}::test_length_limit_overlong_filtering_and_zero_reward_on_non_stop",
    ),
    "generator.zero_reward_on_non_stop": (
        _GENERATOR_KEYS,
        f"{_GENERATOR}::test_length_limit_overlong_filtering_and_zero_reward_on_non_stop",
    ),
    "generator.chat_template_kwargs": (_GENERATOR_KEYS,),
    "generator.chat_template.*": (
        "models/test_chat_templates.py::test_a_jinja_file_becomes_the_template",
        "models/test_chat_templates.py::test_qwen3_without_thinking_drops_reasoning_from_assistant_turns",
    ),
    "environment.env_class": (_COLUMNS, _NAMES),
    "environment.max_env_workers": (_GENERATOR_KEYS,),
    "environment.env_step_timeout_s": (
        _GENERATOR_KEYS,
        f"{_GENERATOR}::test_env_failures_are_recorded_masked_counted_and_each_new_reason_logged_once",
    ),
    "environment.env_configs": (_GENERATOR_KEYS,),
    # training-health checks
    "trainer.health.enabled": ("test_health.py::test_disabled_monitor_returns_nothing_and_never_stops",),
    "trainer.health.warmup_steps": (
        "test_health.py::test_a_failing_check_alerts_after_warmup_plus_patience_steps",
        "test_health.py::test_failures_shorter_than_patience_or_inside_warmup_do_not_alert",
    ),
    "trainer.health.patience": ("test_health.py::test_a_failing_check_alerts_after_warmup_plus_patience_steps",),
    "trainer.health.stop_on_alert": (
        "test_health.py::test_stop_on_alert_raises_with_the_same_message_naming_the_key",
        "trainer/test_trainer_health.py::test_stop_on_alert_ends_the_run_after_logging_the_alert",
    ),
    "trainer.health.max_*": (
        "test_health.py::test_absolute_thresholds_compare_against_the_configured_value",
        "test_health.py::test_null_threshold_turns_the_check_off",
    ),
    "trainer.health.entropy_collapse_ratio": ("test_health.py::test_entropy_collapse_is_relative_to_the_warmup_mean",),
    "trainer.health.grad_norm_*": (
        "test_health.py::test_grad_norm_spike_needs_the_factor_and_adapts_through_the_window",
    ),
    "trainer.health.reward_*": ("test_health.py::test_reward_collapse_follows_the_moving_average_from_its_best",),
    "trainer.health.no_signal_steps": ("test_health.py::test_no_reward_signal_needs_its_own_number_of_steps",),
    # reward models and reward managers
    "reward.manager": (
        "rewards/test_managers.py::test_make_reward_manager_follows_the_config",
        "rewards/test_managers.py::test_batch_calls_once_with_lists",
    ),
    "reward.function": (
        "rewards/test_functions.py::test_file_and_module_specs_load_the_named_function",
        "rewards/test_managers.py::test_naive_calls_once_per_response_and_reports_failures",
    ),
    "reward.num_workers": ("rewards/test_process_pool.py::test_num_workers_processes_serve_the_calls",),
    "reward.timeout_s": ("rewards/test_process_pool.py::test_timeout_s_decides_whether_a_slow_call_finishes",),
    "reward.combine": (
        "rewards/test_scorer.py::test_by_row_gives_model_rows_the_model_score_and_keeps_the_rest",
        "rewards/test_scorer.py::test_model_combine_drops_the_env_reward",
    ),
    "reward.model_coef": ("rewards/test_scorer.py::test_sum_adds_model_coef_times_the_score_to_the_manager_reward",),
    "reward.model.path": (
        "trainer/test_trainer_rewards.py::test_one_step_trains_on_the_reward_models_scores",
        "workers/test_reward_worker.py::test_missing_model_path_names_the_reward_key",
    ),
    "reward.model.sequence_parallel_size": (
        "workers/test_reward_worker.py::test_sequence_parallel_is_refused_naming_the_key",
    ),
    "reward.model.micro_batch_size_per_gpu": (
        "workers/test_reward_worker.py::test_micro_batch_size_sets_forward_passes_but_not_scores",
    ),
    "reward.model.max_length": ("rewards/test_model_input.py::test_long_inputs_keep_their_last_tokens",),
    # DAPO, KL in reward, normalisation and offloading (trainer step and workers)
    "trainer.algorithm.dynamic_sampling.type": (
        "rollouts/test_collector.py::test_filter_generates_until_the_batch_is_full_of_informative_groups",
        "rollouts/test_collector.py::test_replace_samples_another_batch_when_too_few_groups_are_informative",
        "trainer/test_dynamic_sampling.py::test_filter_trains_on_full_batches_of_informative_groups",
    ),
    "trainer.algorithm.dynamic_sampling.max_sample_batches": (
        "rollouts/test_collector.py::test_filter_stops_with_a_clear_error_after_max_sample_batches",
    ),
    "trainer.algorithm.dynamic_sampling.min_replace_ratio": (
        "rollouts/test_dynamic_sampling.py::test_replace_copies_informative_groups_only_when_enough_of_them",
        "rollouts/test_collector.py::test_replace_samples_another_batch_when_too_few_groups_are_informative",
    ),
    "trainer.algorithm.overlong_buffer.*": (
        "rollouts/test_collector.py::test_no_dynamic_sampling_generates_once_and_shapes_rewards",
        "rollouts/test_collector.py::test_soft_overlong_punishment_is_added_on_the_last_generated_token",
        "trainer/test_dynamic_sampling.py::test_replace_and_overlong_punishment_reach_the_trained_batch",
    ),
    "trainer.algorithm.advantage_batch_normalize": (
        "trainer/test_step_contracts.py::test_batch_normalised_advantages_are_z_scored_over_trained_tokens",
    ),
    "trainer.algorithm.use_kl_in_reward": (
        "trainer/test_step_contracts.py::test_kl_in_reward_penalises_tokens_and_feeds_the_controller_sequence_sums",
        "trainer/test_trainer_resume.py::test_resume_keeps_the_lr_schedule_kl_coefficient_and_eval_before",
    ),
    "trainer.algorithm.on_policy_distillation": (
        "trainer/test_trainer_phases.py::test_on_policy_distillation_replaces_the_env_reward_with_the_teacher_gap",
        "trainer/test_trainer_runs.py::test_on_policy_distillation_trains_on_the_teacher_gap_from_the_ref_workers",
    ),
    "trainer.algorithm.kl_ctrl.*": (
        "trainer/test_step_contracts.py::test_kl_in_reward_penalises_tokens_and_feeds_the_controller_sequence_sums",
        "trainer/test_step_contracts.py::test_driver_state_round_trips_through_a_checkpoint_dict",
        "algorithms/test_kl.py::test_adaptive_controller_follows_the_proportional_rule",
    ),
    "trainer.*.optimizer.offload_after_step": (
        "workers/strategy/test_fsdp2.py::test_optimizer_state_moves_between_devices_but_step_counts_stay",
        "workers/strategy/test_fsdp2.py::test_offload_after_step_frees_accelerator_memory",
    ),
    "trainer.algorithm.loss_reduction": (
        "workers/test_data_parallel_loss.py::test_one_and_two_ranks_give_the_same_gradient",
        "trainer/test_step_contracts.py::test_loss_denominator_is_the_whole_mini_batch",
        "algorithms/test_reductions.py::test_token_mean_divides_by_valid_tokens",
    ),
}
"""Key (fnmatch pattern) -> tests (`<path under skyrl-train/tests>::<test function>`) that fail if it is ignored."""

PENDING_EVIDENCE: dict[str, str] = {}
"""Keys whose code other engineers are changing on branches not merged yet (owner's planned tests). Empty on main:
a merge moves their tests into EVIDENCE."""

_FREE_MAPPINGS = {path for path, _, _, annotation in iter_fields(SkyRLConfig) if is_free_mapping(annotation)}


def leaf_keys() -> list[str]:
    """Every leaf key of `SkyRLConfig().to_dict()`; a free-form mapping (env_configs, ...) is one leaf."""

    def walk(data: dict, prefix: str):
        for name, value in data.items():
            path = f"{prefix}.{name}" if prefix else name
            if isinstance(value, dict) and path not in _FREE_MAPPINGS:
                yield from walk(value, path)
            else:
                yield path

    return list(walk(SkyRLConfig().to_dict(), ""))


def _matches(patterns, key: str) -> list[str]:
    return [pattern for pattern in patterns if fnmatch.fnmatchcase(key, pattern)]


@cache
def _test_functions(relative: str) -> set[str]:
    path = TESTS / relative
    if not path.is_file():
        return set()
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_leaf_key_has_evidence_or_is_not_yet_supported():
    unsupported = {entry.key for entry in NOT_YET_SUPPORTED}
    orphans, ambiguous = [], []
    for key in leaf_keys():
        # several EVIDENCE patterns may add tests to one key; the three kinds of home exclude each other
        kinds = [bool(_matches(EVIDENCE, key)), bool(_matches(PENDING_EVIDENCE, key)), key in unsupported]
        if not any(kinds):
            orphans.append(key)
        elif sum(kinds) > 1:
            ambiguous.append(key)
    assert not orphans, f"keys with neither a behavioural test nor a 'not supported yet' entry: {orphans}"
    assert not ambiguous, f"keys both evidenced and pending or not supported: {ambiguous}"
    assert len(leaf_keys()) > 150  # the walk really reached the leaves


def test_every_entry_names_real_keys_and_real_tests():
    keys = leaf_keys()
    for table in (EVIDENCE, PENDING_EVIDENCE):
        stale = [pattern for pattern in table if not fnmatch.filter(keys, pattern)]
        assert not stale, f"patterns that match no config key: {stale}"
    missing = []
    for pattern, tests in EVIDENCE.items():
        assert tests, f"{pattern}: no test named"
        for test in tests:
            relative, _, function = test.partition("::")
            if function not in _test_functions(relative):
                missing.append(f"{pattern}: {test}")
    assert not missing, f"evidence naming tests that do not exist: {missing}"
    assert {entry.key for entry in NOT_YET_SUPPORTED} <= set(keys)


@pytest.mark.parametrize("entry", NOT_YET_SUPPORTED, ids=lambda entry: entry.key)
def test_each_not_yet_supported_value_is_refused_by_name(entry):
    section, _, name = entry.key.rpartition(".")
    data: dict = {}
    node = data
    for part in section.split("."):
        node = node.setdefault(part, {})
    node[name] = entry.refused_example
    with pytest.raises(ConfigValidationError) as info:
        SkyRLConfig.from_dict(data)
    assert any(p.startswith(f"{entry.key}=") and "is not supported here yet" in p for p in info.value.problems)
    assert getattr_path(SkyRLConfig(), entry.key) in entry.accepted  # the default works today


def getattr_path(cfg: object, key: str) -> object:
    value = cfg
    for name in key.split("."):
        value = getattr(value, name)
    return value


def test_the_reference_docs_list_every_not_yet_supported_key():
    text = DOCS.read_text()
    section = text.split("## Not supported yet", 1)[1].split("\n## ", 1)[0]
    for entry in NOT_YET_SUPPORTED:
        assert f"| `{entry.key}` |" in section, entry.key


# ----- NovaSky-AI/SkyRL's spellings (config/upstream_keys.py): an accepted alias lands on a key the code reads, and a
# key accepted as "what this project always does" refuses every other value by the feature it asks for.


def _homed(key: str) -> bool:
    unsupported = {entry.key for entry in NOT_YET_SUPPORTED}
    return bool(_matches(EVIDENCE, key)) or bool(_matches(PENDING_EVIDENCE, key)) or key in unsupported


def _leaves_under(key: str) -> list[str]:
    return [leaf for leaf in leaf_keys() if leaf == key or leaf.startswith(f"{key}.")] or [
        leaf for leaf in leaf_keys() if key.startswith(f"{leaf}.")  # a key inside a free-form mapping
    ]


_ALIASES = {key: rule for key, rule in RULES.items() if isinstance(rule, Rename)}


@pytest.mark.parametrize("upstream", list(_ALIASES))
def test_every_upstream_alias_lands_on_keys_the_code_reads(upstream):
    rule = _ALIASES[upstream]
    targets = [*rule.targets, *(key for key, _ in rule.implies)]
    for target in targets:
        if target in RULES:  # a legacy spelling of a current-layout key, which has its own rule
            continue
        leaves = _leaves_under(target)
        assert leaves, f"{upstream} -> {target}: no such config key"
        orphans = [leaf for leaf in leaves if not _homed(leaf)]
        assert not orphans, f"{upstream} -> {target}: keys nothing reads or refuses: {orphans}"


def test_every_translated_value_lands_on_a_key_the_code_reads():
    for key, rules in VALUE_RULES.items():
        for _, rule in rules:
            if isinstance(rule, Replace):
                assert all(_homed(leaf) for leaf in _leaves_under(key)), key


_EXAMPLES = (True, False, None, 12345, "something-else", {"k": 1})


def _refused_example(rule: Fixed):
    """A value outside `rule.accepted`, of the accepted values' type when there is one; None when every value of a
    boolean key is accepted."""
    if {True, False} <= {value for value in rule.accepted if isinstance(value, bool)}:
        return None
    outside = [example for example in _EXAMPLES if not any(same_value(example, a) for a in rule.accepted)]
    kinds = {type(value) for value in rule.accepted if value is not None}
    return ([example for example in outside if type(example) in kinds] or outside)[0]


_FIXED = {key: rule for key, rule in RULES.items() if isinstance(rule, Fixed)}


@pytest.mark.parametrize("upstream", list(_FIXED))
def test_fixed_keys_store_nothing_and_refuse_other_values_by_feature(upstream):
    rule = _FIXED[upstream]
    for value in rule.accepted:
        translation = translate_overrides([Override(upstream, value, "set", f"{upstream}={value!r}")])
        assert not translation.problems and not translation.overrides, (upstream, value)
        assert translation.applied[0].note == rule.means
    example = _refused_example(rule)
    if example is None:
        assert not rule.feature, f"{upstream} accepts every value, so it names no feature to refuse"
        return
    translation = translate_overrides([Override(upstream, example, "set", f"{upstream}={example!r}")])
    [problem] = translation.problems
    assert isinstance(problem, UnsupportedFeatureError) and rule.feature in str(problem)
    assert "is not supported here" in str(problem)


@pytest.mark.parametrize("upstream", [key for key, rule in RULES.items() if isinstance(rule, Ignored)])
def test_ignored_settings_belong_to_a_feature_whose_switch_is_refused(upstream):
    switch = RULES[upstream].switch
    key, _, value = switch.partition("=")
    if key in _FIXED:
        assert _refused_example(_FIXED[key]) is not None, f"{upstream}: its switch {key} accepts every value"
    elif key in VALUE_RULES:  # a value of a shared key, refused by name
        assert any(isinstance(rule, Refuse) and given == value for given, rule in VALUE_RULES[key]), upstream
    elif switch.endswith("lora.rank > 0 with trainer.strategy=megatron"):  # refused by the Megatron checks
        role = upstream.split(".")[1]
        with pytest.raises(
            ConfigValidationError,
            match=f"trainer.{role}.model.lora.rank=8: LoRA on the Megatron workers is not supported here",
        ):
            SkyRLConfig.from_cli_overrides(
                ["trainer.strategy=megatron", f"trainer.{role}.model.lora.rank=8", "trainer.algorithm.use_kl_loss=true"]
            )
    else:  # a registry name this project lacks, e.g. policy_loss_type=dppo
        from skyrl_train.config.upstream_keys import UPSTREAM_NAMES

        assert value in {name for _, name in UPSTREAM_NAMES}, f"{upstream}: switch {switch!r} is not refused"
