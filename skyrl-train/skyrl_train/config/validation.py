"""Cross-field checks of a whole `SkyRLConfig`, each reporting what is wrong and what to change.

Checks are plain functions in `ERROR_CHECKS` (problems that make the run fail or do something else than asked) and
`WARNING_CHECKS` (settings that run but waste resources). A critic with an estimator other than `gae` is a warning,
not an error: a user-registered estimator may read the values.
"""

import math
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from skyrl_train.config.errors import ConfigValidationError, ConfigWarning
from skyrl_train.config.generator import ENGINE_FIELD_SAMPLING_KWARGS, RESERVED_SAMPLING_KWARGS
from skyrl_train.config.health import check_health
from skyrl_train.config.megatron_checks import check_megatron_optimizer, warn_inert_megatron_optimizer
from skyrl_train.config.mode_checks import check_async, check_lora, check_off_policy_correction
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


def get_path(cfg: object, path: str) -> object:
    """The value at dotted `path` of a config object, e.g. `get_path(cfg, "trainer.seed")`."""
    value = cfg
    for name in path.split("."):
        value = getattr(value, name)
    return value


def role_world_size(cfg: "SkyRLConfig", role: str) -> int:
    """Worker processes of `role` (`policy`, `ref`, `critic` or `reward`): nodes times GPUs (or CPU workers) per
    node."""
    placement = cfg.trainer.placement
    return getattr(placement, f"{role}_num_nodes") * getattr(placement, f"{role}_num_gpus_per_node")


def role_data_parallel_size(cfg: "SkyRLConfig", role: str) -> int:
    """Data-parallel ranks of `role`: its world size divided by its sequence-parallel size, or on Megatron by its
    model-parallel size (tensor * pipeline * context)."""
    section = role_section(cfg, role)
    if cfg.trainer.strategy == "megatron" and hasattr(section, "megatron"):
        return max(1, role_world_size(cfg, role) // megatron_model_parallel_size(section.megatron))
    return role_world_size(cfg, role) // section.sequence_parallel_size


def megatron_model_parallel_size(megatron: object) -> int:
    """Ranks holding one copy of the model on Megatron: tensor * pipeline * context parallel sizes."""
    return megatron.tensor_model_parallel_size * megatron.pipeline_model_parallel_size * megatron.context_parallel_size


def role_section(cfg: "SkyRLConfig", role: str) -> object:
    """The config section of `role`: `trainer.<role>` for policy, ref and critic, `reward.model` for reward."""
    return cfg.reward.model if role == "reward" else getattr(cfg.trainer, role)


def _trained_roles(cfg: "SkyRLConfig") -> list[str]:
    return ["policy", "critic"] if cfg.needs_critic else ["policy"]


def _used_roles(cfg: "SkyRLConfig") -> list[str]:
    return (
        _trained_roles(cfg)
        + (["ref"] if cfg.needs_ref_model and not cfg.ref_is_policy_base else [])
        + (["reward"] if cfg.needs_reward_model else [])
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
                f"{prefix}.repetition_penalty={params.repetition_penalty} is not supported by the sglang engine: SGLang"
                " penalises only the tokens it generated, not the prompt's; set it to 1.0 or use backend=vllm or hf"
            )
        engine_only = [n for n in names if n not in ENGINE_FIELD_SAMPLING_KWARGS and n not in RESERVED_SAMPLING_KWARGS]
        if backend == "hf" and engine_only:
            yield (
                f"{prefix}.additional_kwargs {engine_only} are not supported by the hf engine"
                f" (generator.inference_engine.backend=hf honours only {list(ENGINE_FIELD_SAMPLING_KWARGS)}):"
                " remove them or use backend=vllm"
            )
    if backend == "hf" and cfg.generator.inference_engine.tensor_parallel_size != 1:
        yield (
            "generator.inference_engine.tensor_parallel_size must be 1 with backend=hf (the hf engine runs on one"
            f" device), got {cfg.generator.inference_engine.tensor_parallel_size}"
        )


def check_batch_sizes(cfg: "SkyRLConfig") -> Iterator[str]:
    """Mini-batches divide the training batch. A mini-batch need not split evenly over the data-parallel ranks and
    their micro-batches: the ranks' shards are evened out with loss-masked copies of a row, and the last micro-batch
    of a shard may be smaller (`workers.dispatch`, `workers.micro_batching`); the loss is normalised over the whole
    unpadded mini-batch, so the gradient is the one of the rows as they are."""
    trainer = cfg.trainer
    if min(trainer.train_batch_size, cfg.generator.n_samples_per_prompt) < 1:
        return  # reported by check_ranges
    for role in _trained_roles(cfg):
        mini = getattr(trainer, f"{role}_mini_batch_size")
        if mini >= 1 and trainer.train_batch_size % mini:
            yield (
                f"trainer.train_batch_size ({trainer.train_batch_size}) must be divisible by"
                f" trainer.{role}_mini_batch_size ({mini}): set the mini-batch size to a divisor of the batch size"
            )


def check_sequence_parallel(cfg: "SkyRLConfig") -> Iterator[str]:
    """Each used role's sequence-parallel size divides its number of workers (the reward model's is refused in
    `check_rewards` unless it is 1)."""
    for role in _used_roles(cfg):
        if role == "reward":
            continue
        sp = getattr(cfg.trainer, role).sequence_parallel_size
        world = role_world_size(cfg, role)
        if sp >= 1 and world % sp:
            yield (
                f"trainer.{role}.sequence_parallel_size ({sp}) must divide the {role}'s {world} workers"
                f" (trainer.placement.{role}_num_nodes * {role}_num_gpus_per_node)"
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


def check_generator(cfg: "SkyRLConfig") -> Iterator[str]:
    """Batched generation is single-turn and not step-wise; remote engines have URLs; lengths are consistent."""
    generator = cfg.generator
    if generator.batched is True and generator.max_turns != 1:
        yield (
            f"generator.batched=true needs generator.max_turns=1 (got {generator.max_turns}): batched generation is"
            " single-turn, set batched=false for multi-turn rollouts"
        )
    if generator.batched is True and generator.workflow not in (None, "env"):
        yield (
            f"generator.batched=true has no effect with generator.workflow={generator.workflow}: the workflow runs each"
            " episode itself; set batched=false"
        )
    if generator.workflow_args and generator.workflow is None:
        yield (
            f"generator.workflow_args={dict(generator.workflow_args)} needs generator.workflow: they are the "
            "arguments of that workflow's constructor"
        )
    if generator.batched is True and generator.step_wise_trajectories:
        yield ("generator.step_wise_trajectories=true does not work with generator.batched=true: set batched=false")
    if not generator.use_conversation_multi_turn and generator.step_wise_trajectories:
        yield (
            "generator.use_conversation_multi_turn=false does not work with generator.step_wise_trajectories=true (a"
            " step's prompt is the conversation so far as chat messages): set one of them back"
        )
    if not generator.use_conversation_multi_turn and generator.workflow not in (None, "env"):
        yield (
            f"generator.use_conversation_multi_turn=false has no effect with generator.workflow={generator.workflow}:"
            " the workflow builds each episode's tokens itself; remove it"
        )
    engine = generator.inference_engine
    if engine.backend == "remote":
        if not engine.remote_urls:
            yield "generator.inference_engine.backend=remote needs remote_urls, e.g. [http://127.0.0.1:8000]"
        elif engine.num_engines != len(engine.remote_urls):
            yield (
                f"generator.inference_engine.num_engines={engine.num_engines} but remote_urls has"
                f" {len(engine.remote_urls)} URLs: the remote backend runs one engine per URL, set them equal"
            )
        if cfg.trainer.policy.model.lora.rank > 0:
            yield (
                "trainer.policy.model.lora.rank > 0 with generator.inference_engine.backend=remote: adapter-only"
                " weight sync into remote servers is not wired yet; use backend=vllm or hf, or lora.rank=0"
            )
    elif engine.remote_urls:
        yield (
            f"generator.inference_engine.remote_urls is set but backend={engine.backend}: the URLs are only read by"
            " backend=remote"
        )
    if engine.backend == "sglang" and cfg.trainer.device == "cpu":
        yield "generator.inference_engine.backend=sglang needs a GPU: use backend=vllm or hf with trainer.device=cpu"
    if generator.max_input_length is not None and generator.max_input_length < cfg.data.max_prompt_length:
        yield (
            f"generator.max_input_length ({generator.max_input_length}) is shorter than data.max_prompt_length"
            f" ({cfg.data.max_prompt_length}): raise it or set it to null"
        )


def check_placement(cfg: "SkyRLConfig") -> Iterator[str]:
    """Colocation shares one GPU pool, so its members must have equal GPU counts; IPC/shm sync needs colocation."""
    engine = cfg.generator.inference_engine
    policy_workers = role_world_size(cfg, "policy")
    if cfg.trainer.placement.colocate_all:
        if engine.backend == "remote":
            yield (
                "trainer.placement.colocate_all=true cannot share GPUs with remote engines"
                " (generator.inference_engine.backend=remote): set colocate_all=false"
            )
        else:
            engine_gpus = engine.num_engines * engine.tensor_parallel_size
            if engine_gpus != policy_workers:
                yield (
                    f"trainer.placement.colocate_all=true needs as many engine GPUs (num_engines * tensor_parallel_size"
                    f" = {engine.num_engines} * {engine.tensor_parallel_size} = {engine_gpus}) as policy GPUs"
                    f" (policy_num_nodes * policy_num_gpus_per_node = {policy_workers}): change one of them or set"
                    " colocate_all=false"
                )
        for role in _used_roles(cfg):
            if role != "policy" and role_world_size(cfg, role) != policy_workers:
                yield (
                    f"trainer.placement.colocate_all=true needs the {role} on as many GPUs as the policy"
                    f" ({role_world_size(cfg, role)} vs {policy_workers}): set trainer.placement.{role}_num_nodes and"
                    f" {role}_num_gpus_per_node like the policy's (a colocated {role} on fewer GPUs than the policy, which"
                    " SkyRL allows, is not supported here)"
                )
    sync = engine.weight_sync_backend
    if sync in ("cuda_ipc", "shm") and not cfg.trainer.placement.colocate_all:
        yield (
            f"generator.inference_engine.weight_sync_backend={sync} only works when trainer and engines share"
            " machines' memory: set trainer.placement.colocate_all=true or use broadcast/checkpoint"
        )
    if sync == "cuda_ipc" and cfg.trainer.device == "cpu":
        yield "generator.inference_engine.weight_sync_backend=cuda_ipc needs CUDA: use shm with trainer.device=cpu"
    if sync == "delta":
        yield from _check_delta(engine.delta_weight_sync)
    yield from check_gpu_weight_sync(cfg)


def _check_delta(delta: object) -> Iterator[str]:
    """The `delta` weight sync's folder is one the engines' processes can read, and its sizes are positive."""
    prefix = "generator.inference_engine.delta_weight_sync"
    if delta.sync_dir is not None and str(delta.sync_dir).startswith("memory://"):
        yield (
            f"{prefix}.sync_dir={delta.sync_dir}: a memory:// folder lives in one process, and the engines run in"
            " others: use a folder (shared across machines) or a bucket URL"
        )
    if not delta.max_file_size_in_gb > 0:
        yield f"{prefix}.max_file_size_in_gb must be positive, got {delta.max_file_size_in_gb}"
    if delta.cloud_download_workers < 1:
        yield f"{prefix}.cloud_download_workers must be at least 1, got {delta.cloud_download_workers}"
    if delta.publish_num_workers is not None and delta.publish_num_workers < 1:
        yield f"{prefix}.publish_num_workers must be null (min(8, CPUs)) or at least 1, got {delta.publish_num_workers}"


def check_gpu_weight_sync(cfg: "SkyRLConfig") -> Iterator[str]:
    """On a colocated GPU run, Ray shows each actor only its own bundle's GPU: `cuda_ipc` reaches only the engine on
    policy rank 0's GPU, and `broadcast` cannot serve that engine (NCCL refuses two ranks of one group on one GPU).
    `auto` gives each engine the transport that reaches it (`weight_sync.locations.plan_weight_sync`)."""
    engine = cfg.generator.inference_engine
    if not cfg.trainer.placement.colocate_all or engine.backend == "remote" or cfg.trainer.device == "cpu":
        return
    if cfg.trainer.device == "auto" and cfg.resolved_device() != "cuda":
        return
    policy_gpus = role_world_size(cfg, "policy")
    if engine.weight_sync_backend == "cuda_ipc" and policy_gpus > 1:
        yield (
            f"generator.inference_engine.weight_sync_backend=cuda_ipc with {policy_gpus} colocated GPUs: only the"
            " engine on policy rank 0's GPU can open its CUDA IPC handles (Ray shows each actor only its own GPU);"
            " use weight_sync_backend=auto (cuda_ipc for that engine, an NCCL broadcast group for the others)"
        )
    if engine.weight_sync_backend == "broadcast":
        yield (
            "generator.inference_engine.weight_sync_backend=broadcast with trainer.placement.colocate_all=true on"
            " GPUs puts engine 0 on policy rank 0's GPU, and NCCL refuses two ranks of one group on one GPU: use"
            " weight_sync_backend=auto (cuda_ipc for that engine, broadcast for the others) or colocate_all=false"
        )


def check_engine_tensor_parallel(cfg: "SkyRLConfig") -> Iterator[str]:
    """An engine actor gets `tensor_parallel_size` GPUs only in a separate placement and only the sglang engine runs
    its tensor-parallel workers in them (SGLang starts one process per GPU it sees); the vllm engine holds
    `vllm.LLM` in its actor process, and vLLM puts a tensor-parallel engine inside a Ray placement group on Ray
    workers of its own, which our weight updates do not reach."""
    engine = cfg.generator.inference_engine
    tp = engine.tensor_parallel_size
    if tp <= 1:
        return
    if engine.backend == "vllm":
        yield (
            f"generator.inference_engine.tensor_parallel_size={tp} with backend=vllm: the vllm engine runs vllm.LLM in"
            " its own Ray actor on one GPU, so tensor parallelism is not supported; use more engines with"
            f" tensor_parallel_size=1 (num_engines={engine.num_engines * tp}), backend=sglang with"
            " trainer.placement.colocate_all=false, or a `vllm serve -tp` server through backend=remote"
        )
    elif engine.backend == "sglang" and cfg.trainer.placement.colocate_all:
        yield (
            f"generator.inference_engine.tensor_parallel_size={tp} with trainer.placement.colocate_all=true: a"
            " colocated engine shares one GPU with one policy rank, so its tensor-parallel workers would have no GPUs;"
            f" set colocate_all=false (each sglang engine then gets {tp} GPUs) or tensor_parallel_size=1"
        )


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
            f"reward.model.sequence_parallel_size={reward.model.sequence_parallel_size}: sequence parallelism is not"
            " supported for the reward model; set it to 1"
        )
    if cfg.generator.step_wise_trajectories and (calls_function or cfg.needs_reward_model):
        used = [f"reward.manager={reward.manager}"] if calls_function else []
        used += ["reward.model.path"] if cfg.needs_reward_model else []
        yield (
            f"generator.step_wise_trajectories=true is not supported with {' and '.join(used)}: rewards are"
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
    ref, full fine-tuning, padded micro-batches), and parallel sizes that fit each role's workers."""
    if cfg.trainer.strategy != "megatron":
        return
    if cfg.trainer.device == "cpu":
        yield "trainer.strategy=megatron needs CUDA GPUs (megatron-core's forward runs on CUDA): use trainer.device=cuda"
    if cfg.needs_critic:
        yield "trainer.strategy=megatron does not run a critic yet: unset trainer.critic.model.path or use fsdp2"
    if cfg.needs_reward_model:
        yield "trainer.strategy=megatron does not run a reward model yet: unset reward.model.path or use fsdp2"
    if cfg.trainer.remove_microbatch_padding is True:
        yield (
            "trainer.remove_microbatch_padding=true: sequence packing is not supported by the megatron workers yet "
            "(they run padded micro-batches); set it to auto (packs on fsdp2 only) or false, or use strategy fsdp2"
        )
    for role in ("policy", "ref") if cfg.needs_ref_model else ("policy",):
        section = getattr(cfg.trainer, role)
        if section.model.lora.rank > 0:
            yield f"trainer.{role}.model.lora.rank={section.model.lora.rank}: LoRA is not wired into Megatron workers"
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
        world, model_parallel = role_world_size(cfg, role), megatron_model_parallel_size(megatron)
        if world % model_parallel:
            yield (
                f"{prefix}: tensor ({sizes['tensor_model_parallel_size']}) * pipeline"
                f" ({sizes['pipeline_model_parallel_size']}) * context ({sizes['context_parallel_size']}) parallel"
                f" sizes = {model_parallel} must divide the {role}'s {world} workers"
                f" (trainer.placement.{role}_num_nodes * {role}_num_gpus_per_node)"
            )
        elif (world // model_parallel) % sizes["expert_model_parallel_size"]:
            yield (
                f"{prefix}.expert_model_parallel_size={sizes['expert_model_parallel_size']} must divide the {role}'s"
                f" {world // model_parallel} data-parallel ranks (experts spread over tensor-parallel ranks, which SkyRL"
                " allows with expert tensor parallelism, are not supported here)"
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
    check_rewards,
    check_health,
]
"""Checks whose findings make `validate_config` raise; append your own to extend validation."""

WARNING_CHECKS: list[Check] = [
    warn_unused_models,
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
