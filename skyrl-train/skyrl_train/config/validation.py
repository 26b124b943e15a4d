"""Cross-field checks of a whole `SkyRLConfig`, each reporting what is wrong and what to change.

Checks are plain functions in `ERROR_CHECKS` (problems that make the run fail or do something else than asked) and
`WARNING_CHECKS` (settings that run but waste resources). A critic with an estimator other than `gae` is a warning,
not an error: a user-registered estimator may read the values.
"""

import math
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from skyrl_train.config.engine_checks import (
    check_engine_quantization,
    check_engine_tensor_parallel,
    check_generator,
    check_placement,
    warn_engine_spanning_nodes,
    warn_narrow_colocated_roles,
)
from skyrl_train.config.errors import ConfigValidationError, ConfigWarning
from skyrl_train.config.generator import ENGINE_FIELD_SAMPLING_KWARGS, RESERVED_SAMPLING_KWARGS
from skyrl_train.config.health import check_health
from skyrl_train.config.megatron_checks import check_megatron_optimizer, warn_inert_megatron_optimizer
from skyrl_train.config.mode_checks import check_async, check_lora, check_off_policy_correction
from skyrl_train.config.role_sizes import (  # noqa: F401 - importable from here as before
    get_path,
    megatron_model_parallel_size,
    role_data_parallel_size,
    role_section,
    role_world_size,
    trained_roles,
    used_roles,
)
from skyrl_train.config.unsupported import check_not_yet_supported
from skyrl_train.config.upstream_meanings import warn_inert_overlong_buffer, warn_kl_in_reward_coefficient

if TYPE_CHECKING:
    from skyrl_train.config.root import SkyRLConfig

Check = Callable[["SkyRLConfig"], Iterator[str]]

_POSITIVE_INTS = (
    "data.max_prompt_length",
    "trainer.epochs",
    "trainer.update_epochs_per_batch",
    "trainer.train_batch_size",
    "trainer.policy_mini_batch_size",
    "trainer.critic_mini_batch_size",
    "trainer.micro_train_batch_size_per_gpu",
    "trainer.micro_forward_batch_size_per_gpu",
    "trainer.eval_batch_size",
    "trainer.placement.policy_num_nodes",
    "trainer.placement.policy_num_gpus_per_node",
    "trainer.placement.ref_num_nodes",
    "trainer.placement.ref_num_gpus_per_node",
    "trainer.placement.critic_num_nodes",
    "trainer.placement.critic_num_gpus_per_node",
    "trainer.placement.reward_num_nodes",
    "trainer.placement.reward_num_gpus_per_node",
    "trainer.policy.sequence_parallel_size",
    "trainer.ref.sequence_parallel_size",
    "trainer.critic.sequence_parallel_size",
    "generator.n_samples_per_prompt",
    "generator.eval_n_samples_per_prompt",
    "generator.max_turns",
    "generator.inference_engine.num_engines",
    "generator.inference_engine.tensor_parallel_size",
    "generator.sampling_params.max_generate_length",
    "generator.eval_sampling_params.max_generate_length",
    "environment.max_env_workers",
    "reward.num_workers",
    "reward.model.micro_batch_size_per_gpu",
    "reward.model.max_length",
)

_NON_NEGATIVE_FLOATS = (
    "trainer.algorithm.eps_clip_low",
    "trainer.algorithm.eps_clip_high",
    "trainer.algorithm.value_clip",
    "trainer.algorithm.cispo.eps_clip_low",
    "trainer.algorithm.cispo.eps_clip_high",
    "trainer.algorithm.kl_loss_coef",
    "trainer.algorithm.entropy_loss_coef",
    "trainer.algorithm.grpo_std_epsilon",
    "generator.sampling_params.temperature",
    "generator.eval_sampling_params.temperature",
)


def check_ranges(cfg: "SkyRLConfig") -> Iterator[str]:
    """Counts are at least 1 and clip ranges, coefficients and temperatures are not negative."""
    for path in _POSITIVE_INTS:
        if get_path(cfg, path) != "auto" and get_path(cfg, path) < 1:
            yield f"{path} must be at least 1, got {get_path(cfg, path)}"
    for path in ("trainer.placement.num_threads_per_worker", "generator.inference_engine.num_threads"):
        if get_path(cfg, path) is not None and get_path(cfg, path) < 1:
            yield f"{path} must be null (the bundle's CPUs) or at least 1, got {get_path(cfg, path)}"
    if cfg.trainer.max_training_steps is not None and cfg.trainer.max_training_steps < 1:
        # 0 used to read as "no cap" and ran every epoch
        yield f"trainer.max_training_steps must be null (all epochs) or at least 1, got {cfg.trainer.max_training_steps}"
    for path in _NON_NEGATIVE_FLOATS:
        if get_path(cfg, path) < 0:
            yield f"{path} must not be negative, got {get_path(cfg, path)}"
    utilization = cfg.generator.inference_engine.gpu_memory_utilization
    if not 0.0 < utilization <= 1.0:
        yield f"generator.inference_engine.gpu_memory_utilization must be in (0, 1], got {utilization}"
    for section in ("sampling_params", "eval_sampling_params"):
        top_p = getattr(cfg.generator, section).top_p
        if not 0.0 < top_p <= 1.0:
            yield f"generator.{section}.top_p must be in (0, 1], got {top_p}"
    if cfg.trainer.max_ckpts_to_keep == 0 or cfg.trainer.max_ckpts_to_keep < -1:
        yield f"trainer.max_ckpts_to_keep must be -1 (keep all) or at least 1, got {cfg.trainer.max_ckpts_to_keep}"
    for role in ("policy", "critic"):
        lora = getattr(cfg.trainer, role).model.lora
        if lora.rank < 0:
            yield f"trainer.{role}.model.lora.rank must be 0 (no LoRA) or positive, got {lora.rank}"
        betas = getattr(cfg.trainer, role).optimizer.adam_betas
        if len(betas) != 2 or not all(0.0 <= beta < 1.0 for beta in betas):
            yield f"trainer.{role}.optimizer.adam_betas must be two numbers in [0, 1), got {betas}"


def check_algorithm_ranges(cfg: "SkyRLConfig") -> Iterator[str]:
    """Dual-clip bound above 1, token fractions in [0, 1], low <= high bands, positive SAPO temperatures."""
    algorithm = cfg.trainer.algorithm
    prefix = "trainer.algorithm"
    if algorithm.clip_ratio_c <= 1.0:
        yield f"{prefix}.clip_ratio_c must be above 1 (the dual-clip bound), got {algorithm.clip_ratio_c}"
    for path in ("clip_cov.clip_ratio", "kl_cov.kl_cov_frac"):
        value = get_path(algorithm, path)
        if not 0.0 <= value <= 1.0:
            yield f"{prefix}.{path} is a fraction of tokens and must be in [0, 1], got {value}"
    bands = [("clip_cov.clip_cov_lb", "clip_cov.clip_cov_ub")]
    bands += [("off_policy_correction.geo_mask_low", "off_policy_correction.geo_mask_high")]
    bands += [("off_policy_correction.product_mask_low", "off_policy_correction.product_mask_high")]
    bands += [("off_policy_correction.token_mask_low", "off_policy_correction.token_mask_high")]
    for low, high in bands:
        if get_path(algorithm, low) > get_path(algorithm, high):
            low_value, high_value = get_path(algorithm, low), get_path(algorithm, high)
            yield f"{prefix}.{low} ({low_value}) must not exceed {prefix}.{high} ({high_value})"
    for path in ("sapo.tau_pos", "sapo.tau_neg"):
        if get_path(algorithm, path) <= 0:
            yield f"{prefix}.{path} must be positive, got {get_path(algorithm, path)}"
    if algorithm.kl_ctrl.type == "adaptive" and (algorithm.kl_ctrl.kl_target <= 0 or algorithm.kl_ctrl.horizon <= 0):
        yield f"{prefix}.kl_ctrl.type=adaptive needs kl_ctrl.kl_target > 0 and kl_ctrl.horizon > 0"


def check_sampling(cfg: "SkyRLConfig") -> Iterator[str]:
    """Sampling values are in range, `additional_kwargs` do not shadow fields, and the engine can honour them."""
    backend = cfg.generator.inference_engine.backend
    for section in ("sampling_params", "eval_sampling_params"):
        params, prefix = getattr(cfg.generator, section), f"generator.{section}"
        if params.repetition_penalty <= 0:
            yield f"{prefix}.repetition_penalty must be positive (1.0 is no penalty), got {params.repetition_penalty}"
        if params.logprobs is not None and params.logprobs < 0:
            yield f"{prefix}.logprobs must be null, 0 (the sampled token) or k > 0 (top-k too), got {params.logprobs}"
        if not 0.0 <= params.min_p < 1.0:
            yield f"{prefix}.min_p must be in [0, 1), got {params.min_p}"
        if params.top_k == 0 or params.top_k < -1:
            yield f"{prefix}.top_k must be -1 (off) or at least 1, got {params.top_k}"
        names = sorted(params.additional_kwargs)
        shadowing = [name for name in names if name in RESERVED_SAMPLING_KWARGS]
        if shadowing:
            yield (
                f"{prefix}.additional_kwargs sets {shadowing}, which first-class fields set: use"
                f" {prefix}.<field> instead (max_generate_length for max_tokens)"
            )
        if backend == "sglang" and params.repetition_penalty != 1.0:
            yield (
                f"{prefix}.repetition_penalty={params.repetition_penalty} with the sglang engine is not supported here: SGLang"
                " penalises only the tokens it generated, not the prompt's; set it to 1.0 or use backend=vllm or hf"
            )
        engine_only = [n for n in names if n not in ENGINE_FIELD_SAMPLING_KWARGS and n not in RESERVED_SAMPLING_KWARGS]
        if backend == "hf" and engine_only:
            yield (
                f"{prefix}.additional_kwargs {engine_only} with the hf engine are not supported here"
                f" (generator.inference_engine.backend=hf honours only {list(ENGINE_FIELD_SAMPLING_KWARGS)}):"
                " remove them or use backend=vllm"
            )


def check_batch_sizes(cfg: "SkyRLConfig") -> Iterator[str]:
    """Mini-batches divide the training batch. A mini-batch need not split evenly over the data-parallel ranks and
    their micro-batches: the ranks' shards are evened out with loss-masked copies of a row, and the last micro-batch
    of a shard may be smaller (`workers.dispatch`, `workers.micro_batching`); the loss is normalised over the whole
    unpadded mini-batch, so the gradient is the one of the rows as they are."""
    trainer = cfg.trainer
    if min(trainer.train_batch_size, cfg.generator.n_samples_per_prompt) < 1:
        return  # reported by check_ranges
    for role in trained_roles(cfg):
        mini = getattr(trainer, f"{role}_mini_batch_size")
        if mini >= 1 and trainer.train_batch_size % mini:
            yield (
                f"trainer.train_batch_size ({trainer.train_batch_size}) must be divisible by"
                f" trainer.{role}_mini_batch_size ({mini}): set the mini-batch size to a divisor of the batch size"
            )


def check_sequence_parallel(cfg: "SkyRLConfig") -> Iterator[str]:
    """Each used role's sequence-parallel size divides its number of workers; above 1 it needs the fsdp2 workers
    and packed micro-batches (the reward model's is refused in `check_rewards` unless it is 1)."""
    for role in used_roles(cfg):
        if role == "reward":
            continue
        sp = getattr(cfg.trainer, role).sequence_parallel_size
        world = role_world_size(cfg, role)
        if sp < 1:
            yield f"trainer.{role}.sequence_parallel_size must be >= 1, got {sp}"
            continue
        if world % sp:
            yield (
                f"trainer.{role}.sequence_parallel_size ({sp}) must divide the {role}'s {world} workers"
                f" (trainer.placement.{role}_num_nodes * {role}_num_gpus_per_node)"
            )
        if sp > 1 and cfg.trainer.strategy != "fsdp2":
            yield (
                f"trainer.{role}.sequence_parallel_size={sp}: Ulysses sequence parallelism runs on the fsdp2 "
                f"workers only (trainer.strategy={cfg.trainer.strategy}); set it to 1"
            )
        if sp > 1 and cfg.trainer.remove_microbatch_padding is False:
            yield (
                f"trainer.{role}.sequence_parallel_size={sp} splits packed sequences, but "
                "trainer.remove_microbatch_padding=false runs padded micro-batches; set it to auto or true"
            )


def check_models(cfg: "SkyRLConfig") -> Iterator[str]:
    """The policy has a model; `gae` has a critic; KL is added in one place only; distillation has a teacher; Dr.
    GRPO has its normaliser."""
    algorithm = cfg.trainer.algorithm
    if not cfg.trainer.policy.model.path:
        yield "trainer.policy.model.path is empty: set it to a Hugging Face model id or a local model directory"
    if algorithm.use_kl_loss and algorithm.use_kl_in_reward:
        yield (
            "trainer.algorithm.use_kl_loss and trainer.algorithm.use_kl_in_reward are both true: KL is applied either"
            " as a loss or as a reward penalty, set one of them to false"
        )
    if algorithm.on_policy_distillation and algorithm.use_kl_in_reward:
        yield (
            "trainer.algorithm.on_policy_distillation and use_kl_in_reward are both true: distillation's reward is"
            " the teacher's KL term itself, set use_kl_in_reward=false"
        )
    if algorithm.on_policy_distillation and not cfg.trainer.ref.model.path:
        yield (
            "trainer.algorithm.on_policy_distillation=true needs a teacher: set trainer.ref.model.path to a model"
            " with the policy's tokenizer"
        )
    if algorithm.advantage_estimator == "gae" and not cfg.needs_critic:
        yield (
            "trainer.algorithm.advantage_estimator=gae needs a value model: set trainer.critic.model.path"
            " (or use an estimator without a critic such as grpo)"
        )
    if algorithm.loss_reduction == "seq_mean_token_sum_norm" and algorithm.max_seq_len is None:
        yield (
            "trainer.algorithm.loss_reduction=seq_mean_token_sum_norm needs trainer.algorithm.max_seq_len: set it to"
            " the longest response in tokens (usually generator.sampling_params.max_generate_length)"
        )
    if algorithm.dynamic_sampling.type is not None and cfg.generator.n_samples_per_prompt < 2:
        yield (
            f"trainer.algorithm.dynamic_sampling.type={algorithm.dynamic_sampling.type} drops groups without reward"
            " variance, and a group of one sample never has any: set generator.n_samples_per_prompt to 2 or more"
        )
    buffer = algorithm.overlong_buffer
    limit = cfg.generator.sampling_params.max_generate_length
    if buffer.enabled and not 0 < buffer.length <= limit:
        yield (
            f"trainer.algorithm.overlong_buffer.length ({buffer.length}) must be in 1..max_generate_length ({limit})"
        )
    if buffer.enabled and cfg.generator.max_turns > 1:
        yield (
            "trainer.algorithm.overlong_buffer.enabled=true is DAPO's single-turn length penalty (the ramp ends at"
            f" generator.sampling_params.max_generate_length, a per-turn budget); generator.max_turns is"
            f" {cfg.generator.max_turns}: set max_turns=1 or disable the overlong buffer"
        )
    if cfg.trainer.resume_mode == "path" and not cfg.trainer.resume_path:
        yield "trainer.resume_mode=path needs trainer.resume_path: set it to a checkpoint directory"


def _is_function_spec(spec: str) -> bool:
    target, _, name = spec.rpartition(":")
    return bool(target.strip()) and name.isidentifier()


def check_rewards(cfg: "SkyRLConfig") -> Iterator[str]:
    """A reward manager has the function it calls; combinations with a model have one; unsupported settings are
    refused."""
    reward = cfg.reward
    calls_function = reward.manager != "env"
    if calls_function and not reward.function:
        yield (
            f"reward.manager={reward.manager} calls a user scoring function: set reward.function to"
            " 'package.module:name' or '/path/to/file.py:name'"
        )
    if reward.function and not calls_function:
        yield (
            "reward.function is set but reward.manager=env keeps the environment's rewards and never calls it: set"
            " reward.manager to naive, batch or parallel, or unset reward.function"
        )
    if reward.function and not _is_function_spec(reward.function):
        yield f"reward.function={reward.function!r} must look like 'package.module:name' or '/path/to/file.py:name'"
    if reward.combine in ("sum", "model") and not cfg.needs_reward_model:
        yield (
            f"reward.combine={reward.combine} adds a reward model's score: set reward.model.path, or use"
            " reward.combine=by_row"
        )
    if reward.combine == "model" and calls_function:
        yield (
            f"reward.combine=model uses only the reward model's score, so reward.manager={reward.manager} would"
            " never be used: set reward.manager=env, or reward.combine to sum or by_row"
        )
    if not reward.timeout_s > 0:
        yield f"reward.timeout_s must be positive, got {reward.timeout_s}"
    if not math.isfinite(reward.model_coef):
        yield f"reward.model_coef must be a finite number, got {reward.model_coef}"
    if reward.model.sequence_parallel_size != 1:
        yield (
            f"reward.model.sequence_parallel_size={reward.model.sequence_parallel_size}: sequence parallelism for the"
            " reward model is not supported here; set it to 1"
        )
    if cfg.generator.step_wise_trajectories and (calls_function or cfg.needs_reward_model):
        used = [f"reward.manager={reward.manager}"] if calls_function else []
        used += ["reward.model.path"] if cfg.needs_reward_model else []
        yield (
            f"generator.step_wise_trajectories=true with {' and '.join(used)} is not supported here: rewards are"
            " rescored per episode; set step_wise_trajectories=false, or keep reward.manager=env without a reward"
            " model"
        )


def warn_unused_models(cfg: "SkyRLConfig") -> Iterator[str]:
    """A critic that `gae` does not use, or a reference path set while KL is off, only costs GPUs."""
    algorithm = cfg.trainer.algorithm
    if cfg.needs_critic and algorithm.advantage_estimator != "gae":
        yield (
            "trainer.critic.model.path is set but"
            f" trainer.algorithm.advantage_estimator={algorithm.advantage_estimator}"
            " (not gae): the critic is trained, but built-in estimators other than gae ignore its values"
        )
    if cfg.trainer.ref.model.path and not cfg.needs_ref_model:
        yield (
            "trainer.ref.model.path is set but KL is off (use_kl_loss, use_kl_in_reward and on_policy_distillation"
            " are false): no reference model is built"
        )
    penalty = cfg.generator.sampling_params.repetition_penalty
    if penalty != 1.0:
        yield (
            f"generator.sampling_params.repetition_penalty={penalty}: the engine samples (and reports rollout"
            " logprobs) under the penalised distribution, while the trainer recomputes logprobs without the penalty;"
            " rollout and trainer logprobs will differ (see policy/rollout_train_logprob_abs_diff_*)"
        )


def check_megatron(cfg: "SkyRLConfig") -> Iterator[str]:
    """With `trainer.strategy=megatron`: a CUDA device, only the roles the Megatron workers implement (policy and
    ref; LoRA on the policy without dropout), and parallel sizes that fit each role's workers."""
    if cfg.trainer.strategy != "megatron":
        return
    if cfg.trainer.device == "cpu":
        yield "trainer.strategy=megatron needs CUDA GPUs (megatron-core's forward runs on CUDA): use trainer.device=cuda"
    if cfg.needs_critic:
        yield "trainer.strategy=megatron does not run a critic yet: unset trainer.critic.model.path or use fsdp2"
    if cfg.needs_reward_model:
        yield "trainer.strategy=megatron does not run a reward model yet: unset reward.model.path or use fsdp2"
    lora = cfg.trainer.policy.model.lora
    if lora.rank > 0 and lora.dropout > 0:
        yield (
            f"trainer.policy.model.lora.dropout={lora.dropout}: LoRA dropout on the Megatron workers is not supported"
            " here (tensor-parallel ranks would draw different masks); set it to 0"
        )
    for role in ("policy", "ref") if cfg.needs_ref_model else ("policy",):
        section = getattr(cfg.trainer, role)
        megatron, prefix = section.megatron, f"trainer.{role}.megatron"
        sizes = {
            name: getattr(megatron, name)
            for name in (
                "tensor_model_parallel_size",
                "pipeline_model_parallel_size",
                "context_parallel_size",
                "expert_model_parallel_size",
            )
        }
        bad = [f"{prefix}.{name}={value}" for name, value in sizes.items() if value < 1]
        if bad:
            yield f"{', '.join(bad)}: parallel sizes must be at least 1"
            continue
        score_function = megatron.moe_router_score_function
        if score_function not in (None, "softmax", "sigmoid"):
            yield f"{prefix}.moe_router_score_function={score_function}: expected softmax, sigmoid or null (the model's)"
        for end in ("first", "last"):
            layers = getattr(megatron, f"num_layers_in_{end}_pipeline_stage")
            if layers is None:
                continue
            if sizes["pipeline_model_parallel_size"] == 1:
                yield (
                    f"{prefix}.num_layers_in_{end}_pipeline_stage={layers}: an uneven {end} pipeline stage needs"
                    " pipeline_model_parallel_size above 1 (megatron-core refuses it with one stage too); set that"
                    " key of the same section above 1, or this one to null"
                )
            elif layers < 1:
                yield f"{prefix}.num_layers_in_{end}_pipeline_stage={layers}: a stage needs at least 1 decoder layer"
        world, model_parallel = role_world_size(cfg, role), megatron_model_parallel_size(megatron)
        if world % model_parallel:
            yield (
                f"{prefix}: tensor ({sizes['tensor_model_parallel_size']}) * pipeline"
                f" ({sizes['pipeline_model_parallel_size']}) * context ({sizes['context_parallel_size']}) parallel"
                f" sizes = {model_parallel} must divide the {role}'s {world} workers"
                f" (trainer.placement.{role}_num_nodes * {role}_num_gpus_per_node)"
            )
            continue
        expert_tp = megatron.expert_tensor_parallel_size
        if expert_tp is not None and expert_tp < 1:
            yield f"{prefix}.expert_tensor_parallel_size={expert_tp}: parallel sizes must be at least 1 (or null)"
            continue
        expert_grid = sizes["expert_model_parallel_size"] * (expert_tp or sizes["tensor_model_parallel_size"])
        stage_ranks = world // sizes["pipeline_model_parallel_size"]
        if stage_ranks % expert_grid:
            yield (
                f"{prefix}: expert_model_parallel_size ({sizes['expert_model_parallel_size']}) *"
                f" expert_tensor_parallel_size ({expert_tp or sizes['tensor_model_parallel_size']}"
                f"{'' if expert_tp else ', null: the tensor-parallel size'}) = {expert_grid} must divide the {role}'s"
                f" {stage_ranks} ranks per pipeline stage"
            )


ERROR_CHECKS: list[Check] = [
    check_not_yet_supported,
    check_ranges,
    check_sampling,
    check_algorithm_ranges,
    check_batch_sizes,
    check_sequence_parallel,
    check_megatron,
    check_megatron_optimizer,
    check_lora,
    check_async,
    check_off_policy_correction,
    check_models,
    check_generator,
    check_placement,
    check_engine_tensor_parallel,
    check_engine_quantization,
    check_rewards,
    check_health,
]
"""Checks whose findings make `validate_config` raise; append your own to extend validation."""

WARNING_CHECKS: list[Check] = [
    warn_unused_models,
    warn_narrow_colocated_roles,
    warn_engine_spanning_nodes,
    warn_inert_overlong_buffer,
    warn_kl_in_reward_coefficient,
    warn_inert_megatron_optimizer,
]
"""Checks whose findings are emitted as `ConfigWarning`s."""


def find_problems(cfg: "SkyRLConfig") -> list[str]:
    """Every problem the error checks find, in check order."""
    return [problem for check in ERROR_CHECKS for problem in check(cfg)]


def find_warnings(cfg: "SkyRLConfig") -> list[str]:
    """Every finding of the warning checks."""
    return [message for check in WARNING_CHECKS for message in check(cfg)]


def validate_config(cfg: "SkyRLConfig") -> list[str]:
    """Raise `ConfigValidationError` listing every problem; otherwise emit and return the warnings."""
    problems = find_problems(cfg)
    if problems:
        raise ConfigValidationError(problems)
    messages = find_warnings(cfg)
    for message in messages:
        warnings.warn(message, ConfigWarning, stacklevel=3)
    return messages
