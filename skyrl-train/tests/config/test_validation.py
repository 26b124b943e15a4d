"""Cross-field checks: each one triggers on a config that breaks it, with a message saying what to change."""

import warnings

import pytest

from skyrl_train.config import ConfigValidationError, ConfigWarning, SkyRLConfig
from skyrl_train.config.validation import ERROR_CHECKS, find_problems, find_warnings, role_data_parallel_size
from skyrl_train.inference.ray_engine import ENGINE_BUILDERS

# A small valid non-colocated setup the cases below start from: 2 policy GPUs, 2 engines.
BASE = [
    "trainer.train_batch_size=16",
    "trainer.policy_mini_batch_size=8",
    "trainer.critic_mini_batch_size=8",
    "generator.n_samples_per_prompt=4",
    "trainer.placement.policy_num_gpus_per_node=2",
    "trainer.placement.ref_num_gpus_per_node=2",
    "trainer.placement.critic_num_gpus_per_node=2",
    "generator.inference_engine.num_engines=2",
]


def problems_of(*overrides: str) -> list[str]:
    cfg = SkyRLConfig.from_cli_overrides([*BASE, *overrides], validate=False)
    return find_problems(cfg)


def warnings_of(*overrides: str) -> list[str]:
    cfg = SkyRLConfig.from_cli_overrides([*BASE, *overrides], validate=False)
    return find_warnings(cfg)


def test_the_base_setup_is_valid():
    assert problems_of() == []
    assert problems_of("trainer.placement.colocate_all=false") == []


def test_mini_batches_that_do_not_split_evenly_over_ranks_and_micro_batches_are_accepted():
    # SkyRL pads them, as the sharding here does (loss-masked rows; tests/workers/test_data_parallel_loss.py shows
    # the gradient is unchanged): 8 * 4 = 32 sequences over micro 3 * DP 2, and over 3 critic ranks
    assert problems_of("trainer.micro_train_batch_size_per_gpu=3") == []
    critic = ["trainer.critic.model.path=critic", "trainer.algorithm.advantage_estimator=gae"]
    separate = ["trainer.placement.colocate_all=false", "trainer.placement.critic_num_gpus_per_node=3"]
    assert problems_of(*critic, *separate) == []
    # SkyRL's livecodebench layout: 4 prompts x 5 samples = 20 sequences over 8 ranks with micro-batches of 2
    eight = [f"trainer.placement.{role}_num_gpus_per_node=8" for role in ("policy", "ref")]
    lcb = ["trainer.train_batch_size=16", "trainer.policy_mini_batch_size=4", "generator.n_samples_per_prompt=5"]
    assert problems_of(*eight, "generator.inference_engine.num_engines=8", *lcb) == []


CASES = {
    "train batch not divisible by policy mini-batch": (
        ["trainer.policy_mini_batch_size=6"],
        "trainer.train_batch_size (16) must be divisible by trainer.policy_mini_batch_size (6)",
    ),
    "train batch not divisible by critic mini-batch": (
        [
            "trainer.critic.model.path=critic",
            "trainer.algorithm.advantage_estimator=gae",
            "trainer.critic_mini_batch_size=5",
        ],
        "trainer.train_batch_size (16) must be divisible by trainer.critic_mini_batch_size (5)",
    ),
    "KL loss and KL reward together": (
        ["trainer.algorithm.use_kl_in_reward=true"],
        "trainer.algorithm.use_kl_loss and trainer.algorithm.use_kl_in_reward are both true",
    ),
    "distillation without a teacher": (
        ["trainer.algorithm.on_policy_distillation=true"],
        "trainer.algorithm.on_policy_distillation=true needs a teacher: set trainer.ref.model.path",
    ),
    "distillation with KL in the reward": (
        [
            "trainer.algorithm.on_policy_distillation=true",
            "trainer.ref.model.path=teacher",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.algorithm.use_kl_in_reward=true",
        ],
        "trainer.algorithm.on_policy_distillation and use_kl_in_reward are both true",
    ),
    "gae without a critic": (
        ["trainer.algorithm.advantage_estimator=gae"],
        "advantage_estimator=gae needs a value model: set trainer.critic.model.path",
    ),
    "Dr. GRPO reduction without max_seq_len": (
        ["trainer.algorithm.loss_reduction=seq_mean_token_sum_norm"],
        "loss_reduction=seq_mean_token_sum_norm needs trainer.algorithm.max_seq_len",
    ),
    "batched multi-turn": (
        ["generator.batched=true", "generator.max_turns=3"],
        "generator.batched=true needs generator.max_turns=1 (got 3)",
    ),
    "batched step-wise": (
        ["generator.batched=true", "generator.step_wise_trajectories=true"],
        "generator.step_wise_trajectories=true does not work with generator.batched=true",
    ),
    "retokenized chat without step-wise samples": (
        ["generator.max_turns=3", "generator.retokenize_chat_history=true"],
        "generator.retokenize_chat_history=true needs generator.step_wise_trajectories=true",
    ),
    "retokenized chat with a workflow": (
        [
            "generator.max_turns=3",
            "generator.step_wise_trajectories=true",
            "generator.batched=false",
            "generator.retokenize_chat_history=true",
            "generator.workflow=my_agent",
        ],
        "generator.retokenize_chat_history=true has no effect with generator.workflow=my_agent",
    ),
    "engine expert parallelism over other ranks than its tensor-parallel ones": (
        [
            "generator.inference_engine.backend=vllm",
            "generator.inference_engine.tensor_parallel_size=2",
            "generator.inference_engine.expert_parallel_size=4",
        ],
        "generator.inference_engine.expert_parallel_size=4 must be 1 or equal tensor_parallel_size (2)",
    ),
    "engine expert parallelism on the hf engine": (
        ["generator.inference_engine.expert_parallel_size=2", "generator.inference_engine.tensor_parallel_size=2"],
        "generator.inference_engine.expert_parallel_size=2 needs backend=vllm or sglang",
    ),
    "colocated engines with a different GPU count": (
        ["generator.inference_engine.num_engines=1"],
        "colocate_all=true needs as many engine GPUs (num_engines * tensor_parallel_size = 1 * 1 = 1) as policy GPUs",
    ),
    "colocated ref on more GPUs than the policy": (
        ["trainer.placement.ref_num_gpus_per_node=3"],
        "colocate_all=true needs the ref on at most as many GPUs as the policy (3 vs 2)",
    ),
    "async with colocated engines": (
        ["trainer.mode=fully_async"],
        "trainer.mode=fully_async overlaps generation with training",
    ),
    "staleness without an async mode": (
        ["trainer.async_rl.max_staleness=3"],
        "max_staleness=3 has no effect with trainer.mode=sync",
    ),
    "staleness of one_step_off": (
        [
            "trainer.mode=one_step_off",
            "trainer.placement.colocate_all=false",
            "generator.inference_engine.num_engines=1",
            "trainer.async_rl.max_staleness=2",
        ],
        "max_staleness is fixed at 1 in trainer.mode=one_step_off",
    ),
    "async correction without rollout logprobs": (
        [
            "trainer.mode=fully_async",
            "trainer.placement.colocate_all=false",
            "generator.inference_engine.num_engines=1",
            "generator.sampling_params.logprobs=null",
        ],
        "tis_ratio_type=auto (token with trainer.mode=fully_async) weighs tokens by the engines' rollout logprobs",
    ),
    "importance sampling without rollout logprobs": (
        ["trainer.algorithm.off_policy_correction.tis_ratio_type=sequence", "generator.sampling_params.logprobs=null"],
        "tis_ratio_type=sequence weighs tokens by the engines' rollout logprobs",
    ),
    "weight update boundary without fully_async": (
        ["trainer.async_rl.weight_update_boundary=token"],
        "weight_update_boundary=token has no effect with trainer.mode=sync",
    ),
    "token boundary on vllm with LoRA": (
        [
            "trainer.mode=fully_async",
            "trainer.placement.colocate_all=false",
            "generator.inference_engine.num_engines=1",
            "generator.inference_engine.backend=vllm",
            "trainer.policy.model.lora.rank=8",
            "trainer.async_rl.weight_update_boundary=token",
        ],
        "on the vllm engine with LoRA is not supported here",
    ),
    "remote engines without URLs": (
        ["generator.inference_engine.backend=remote", "trainer.placement.colocate_all=false"],
        "backend=remote needs remote_urls",
    ),
    "one remote engine per URL": (
        [
            "generator.inference_engine.backend=remote",
            "generator.inference_engine.remote_urls=['http://a:8000','http://b:8000']",
            "generator.inference_engine.num_engines=1",
            "trainer.placement.colocate_all=false",
        ],
        "num_engines=1 but remote_urls has 2 URLs",
    ),
    "remote URLs the hf backend would ignore": (
        ["generator.inference_engine.remote_urls=['http://a:8000']"],
        "remote_urls is set but backend=hf",
    ),
    "LoRA through remote engines": (
        [
            "generator.inference_engine.backend=remote",
            "generator.inference_engine.remote_urls=['http://a:8000']",
            "trainer.placement.colocate_all=false",
            "trainer.policy.model.lora.rank=8",
        ],
        "adapter-only weight sync into remote servers is not supported here yet",
    ),
    "LoRA through sglang engines": (
        ["generator.inference_engine.backend=sglang", "trainer.policy.model.lora.rank=8"],
        "adapter-only weight sync into SGLang engines is not supported here yet",
    ),
    "colocated remote engines": (
        ["generator.inference_engine.backend=remote", "generator.inference_engine.remote_urls=['http://h:8000']"],
        "colocate_all=true cannot share GPUs with remote engines",
    ),
    "negative eps_clip_low": (
        ["trainer.algorithm.eps_clip_low=-0.1"],
        "trainer.algorithm.eps_clip_low must not be negative",
    ),
    "negative eps_clip_high": (
        ["trainer.algorithm.eps_clip_high=-1"],
        "trainer.algorithm.eps_clip_high must not be negative",
    ),
    "negative cispo eps": (
        ["trainer.algorithm.cispo.eps_clip_high=-1"],
        "trainer.algorithm.cispo.eps_clip_high must not be negative",
    ),
    "dual-clip bound at most 1": (["trainer.algorithm.clip_ratio_c=1.0"], "clip_ratio_c must be above 1"),
    "zero batch size": (
        ["trainer.micro_forward_batch_size_per_gpu=0"],
        "trainer.micro_forward_batch_size_per_gpu must be at least 1, got 0",
    ),
    "resume from path without a path": (
        ["trainer.resume_mode=path"],
        "trainer.resume_mode=path needs trainer.resume_path",
    ),
    "empty policy model": (["trainer.policy.model.path=null"], "trainer.policy.model.path is empty"),
    "sglang on cpu": (
        ["trainer.device=cpu", "generator.inference_engine.backend=sglang"],
        "backend=sglang needs a GPU",
    ),
    "cuda_ipc without colocation": (
        ["trainer.placement.colocate_all=false", "generator.inference_engine.weight_sync_backend=cuda_ipc"],
        "weight_sync_backend=cuda_ipc only works when trainer and engines share",
    ),
    "cuda_ipc on cpu": (
        ["trainer.device=cpu", "generator.inference_engine.weight_sync_backend=cuda_ipc"],
        "weight_sync_backend=cuda_ipc needs CUDA",
    ),
    "sequence parallel not dividing GPUs": (
        ["trainer.policy.sequence_parallel_size=3"],
        "trainer.policy.sequence_parallel_size (3) must divide the policy's 2 workers",
    ),
    "sequence parallel on megatron": (
        ["trainer.strategy=megatron", "trainer.policy.sequence_parallel_size=2"],
        "trainer.policy.sequence_parallel_size=2: Ulysses sequence parallelism runs on the fsdp2 workers only",
    ),
    "sequence parallel without packing": (
        ["trainer.policy.sequence_parallel_size=2", "trainer.remove_microbatch_padding=false"],
        "trainer.policy.sequence_parallel_size=2 splits packed sequences, but trainer.remove_microbatch_padding=false",
    ),
    "gpu memory utilization above 1": (
        ["generator.inference_engine.gpu_memory_utilization=1.5"],
        "gpu_memory_utilization must be in (0, 1], got 1.5",
    ),
    "top_p of zero": (
        ["generator.eval_sampling_params.top_p=0"],
        "generator.eval_sampling_params.top_p must be in (0, 1]",
    ),
    "keep zero checkpoints": (
        ["trainer.max_ckpts_to_keep=0"],
        "trainer.max_ckpts_to_keep must be -1 (keep all) or at least 1",
    ),
    "dynamic sampling with one sample": (
        ["trainer.algorithm.dynamic_sampling.type=filter", "generator.n_samples_per_prompt=1"],
        "set generator.n_samples_per_prompt to 2 or more",
    ),
    "overlong buffer longer than generation": (
        ["trainer.algorithm.overlong_buffer.enabled=true", "trainer.algorithm.overlong_buffer.length=5000"],
        "overlong_buffer.length (5000) must be in 1..max_generate_length (1024)",
    ),
    "max_input_length below prompt length": (
        ["generator.max_input_length=100"],
        "generator.max_input_length (100) is shorter",
    ),
    "three adam betas": (
        ["trainer.policy.optimizer.adam_betas=[0.9,0.99,0.999]"],
        "adam_betas must be two numbers in [0, 1)",
    ),
    "kl_cov fraction above 1": (
        ["trainer.algorithm.kl_cov.kl_cov_frac=2"],
        "kl_cov.kl_cov_frac is a fraction of tokens",
    ),
    "inverted geometric band": (
        ["trainer.algorithm.off_policy_correction.geo_mask_low=1.2"],
        "off_policy_correction.geo_mask_low (1.2) must not exceed",
    ),
    "adaptive KL with zero target": (
        ["trainer.algorithm.kl_ctrl.type=adaptive", "trainer.algorithm.kl_ctrl.kl_target=0"],
        "kl_ctrl.type=adaptive needs kl_ctrl.kl_target > 0",
    ),
    "zero max_training_steps": (
        ["trainer.max_training_steps=0"],
        "trainer.max_training_steps must be null (all epochs) or at least 1, got 0",
    ),
    "negative lora rank": (["trainer.policy.model.lora.rank=-1"], "trainer.policy.model.lora.rank must be 0 (no LoRA)"),
    "non-positive repetition penalty": (
        ["generator.eval_sampling_params.repetition_penalty=0"],
        "generator.eval_sampling_params.repetition_penalty must be positive",
    ),
    "negative logprobs": (["generator.sampling_params.logprobs=-1"], "generator.sampling_params.logprobs must be null"),
    "top_k of zero": (["generator.sampling_params.top_k=0"], "generator.sampling_params.top_k must be -1 (off)"),
    "min_p of one": (["generator.sampling_params.min_p=1.0"], "generator.sampling_params.min_p must be in [0, 1)"),
    "additional_kwargs shadowing a field": (
        ["generator.sampling_params.additional_kwargs={temperature: 0.5, ignore_eos: true}"],
        "generator.sampling_params.additional_kwargs sets ['temperature'], which first-class fields set",
    ),
    "vLLM-only sampling kwargs with the hf engine": (
        ["generator.sampling_params.additional_kwargs={presence_penalty: 0.5, ignore_eos: true}"],
        "generator.sampling_params.additional_kwargs ['presence_penalty'] with the hf engine are not supported here",
    ),
    "repetition penalty with the sglang engine": (
        ["generator.inference_engine.backend=sglang", "generator.eval_sampling_params.repetition_penalty=1.2"],
        "generator.eval_sampling_params.repetition_penalty=1.2 with the sglang engine is not supported here",
    ),
    "tensor parallelism with the hf engine": (
        ["generator.inference_engine.tensor_parallel_size=2", "generator.inference_engine.num_engines=1"],
        "generator.inference_engine.tensor_parallel_size=2 with backend=hf is not supported here",
    ),
    "tensor parallelism with the vllm engine on CPU": (
        [
            "trainer.device=cpu",
            "generator.inference_engine.backend=vllm",
            "generator.inference_engine.tensor_parallel_size=2",
            "generator.inference_engine.num_engines=1",
        ],
        "tensor_parallel_size=2 with backend=vllm on trainer.device=cpu is not supported here",
    ),
    "vllm fp8 rollouts on CPU": (
        [
            "trainer.device=cpu",
            "generator.inference_engine.backend=vllm",
            "generator.inference_engine.engine_init_kwargs.quantization=fp8",
        ],
        "engine_init_kwargs.quantization=fp8 with trainer.device=cpu is not supported here",
    ),
    "colocated vllm engines whose GPUs are not the policy's": (
        [
            "trainer.device=cuda",
            "generator.inference_engine.backend=vllm",
            "generator.inference_engine.tensor_parallel_size=2",
        ],
        "(num_engines * tensor_parallel_size = 2 * 2 = 4) as policy GPUs (policy_num_nodes * policy_num_gpus_per_node"
        " = 2)",
    ),
    "colocated sglang engines with tensor parallelism": (
        [
            "trainer.device=cuda",
            "generator.inference_engine.backend=sglang",
            "generator.inference_engine.tensor_parallel_size=2",
            "generator.inference_engine.num_engines=1",
        ],
        "tensor_parallel_size=2 with backend=sglang and trainer.placement.colocate_all=true is not supported here",
    ),
    "cuda_ipc to colocated engines on several GPUs": (
        ["trainer.device=cuda", "generator.inference_engine.weight_sync_backend=cuda_ipc"],
        "weight_sync_backend=cuda_ipc with 2 colocated GPUs: only the engine on policy rank 0's GPU",
    ),
    "broadcast to colocated engines on GPUs": (
        ["trainer.device=cuda", "generator.inference_engine.weight_sync_backend=broadcast"],
        "puts engine 0 on policy rank 0's GPU, and NCCL refuses two ranks of one group on one GPU",
    ),
    "health warm-up below 0": (["trainer.health.warmup_steps=-1"], "trainer.health.warmup_steps must be 0 or more"),
    "health patience of 0": (["trainer.health.patience=0"], "trainer.health.patience must be at least 1"),
    "health no-signal window of 0": (
        ["trainer.health.no_signal_steps=0"],
        "trainer.health.no_signal_steps must be at least 1",
    ),
    "health clip fraction of 0": (
        ["trainer.health.max_clip_frac=0.0"],
        "trainer.health.max_clip_frac must be positive",
    ),
    "health entropy collapse ratio above 1": (
        ["trainer.health.entropy_collapse_ratio=1.5"],
        "trainer.health.entropy_collapse_ratio is a fraction",
    ),
    "health grad-norm spike factor below 1": (
        ["trainer.health.grad_norm_spike_factor=0.5"],
        "trainer.health.grad_norm_spike_factor must be above 1",
    ),
    "LoRA on the frozen reference": (
        ["trainer.ref.model.lora.rank=4"],
        "trainer.ref.model.lora.rank=4 is not supported here yet",
    ),
    "critic LoRA without a critic": (
        ["trainer.critic.model.lora.rank=4"],
        "trainer.critic.model.lora.rank=4 has no effect without a critic",
    ),
    "critic LoRA alpha without a rank": (
        ["trainer.critic.model.lora.alpha=32"],
        "trainer.critic.model.lora.alpha=32 has no effect with lora.rank=0",
    ),
    "policy LoRA alpha without a rank": (
        ["trainer.policy.model.lora.alpha=32"],
        "trainer.policy.model.lora.alpha=32 has no effect with lora.rank=0",
    ),
}


def test_gpu_weight_sync_backends_pass_where_they_reach_every_engine():
    one_gpu = [
        "trainer.placement.policy_num_gpus_per_node=1",
        "trainer.placement.ref_num_gpus_per_node=1",
        "trainer.placement.critic_num_gpus_per_node=1",
        "generator.inference_engine.num_engines=1",
    ]
    assert problems_of("trainer.device=cuda", "generator.inference_engine.weight_sync_backend=cuda_ipc", *one_gpu) == []
    assert problems_of("trainer.device=cuda", "generator.inference_engine.weight_sync_backend=auto") == []
    assert problems_of("trainer.device=cpu", "generator.inference_engine.weight_sync_backend=broadcast") == []
    separate = ["trainer.device=cuda", "trainer.placement.colocate_all=false"]
    assert problems_of(*separate, "generator.inference_engine.weight_sync_backend=broadcast") == []
    sglang_tp = ["generator.inference_engine.backend=sglang", "generator.inference_engine.tensor_parallel_size=2"]
    assert problems_of(*separate, *sglang_tp) == []


@pytest.mark.parametrize("device", ["cuda", "auto"])  # auto: a GPU script's --dry-run on a machine without one
def test_vllm_tensor_parallelism_passes_where_the_gpus_work_out(device):
    vllm_tp = [
        f"trainer.device={device}",
        "generator.inference_engine.backend=vllm",
        "generator.inference_engine.tensor_parallel_size=2",
    ]
    # colocated: 1 engine x 2 ranks on the policy's 2 GPUs; separate: 2 engines x 2 ranks on 4 GPUs of their own
    assert problems_of(*vllm_tp, "generator.inference_engine.num_engines=1") == []
    assert problems_of(*vllm_tp, "trainer.placement.colocate_all=false") == []
    # colocated on 2 nodes of 4 GPUs: each engine's 2 ranks fit in one node
    two_nodes = [
        f"trainer.placement.{role}_num_{key}" for role in ("policy", "ref") for key in ("nodes=2", "gpus_per_node=4")
    ]
    assert problems_of(*vllm_tp, *two_nodes, "generator.inference_engine.num_engines=4") == []
    # a colocated engine of 16 GPUs over nodes of 8 spans two nodes (SkyRL's 235B scripts): vLLM's Ray executor runs
    # it, and on GPUs the start-up warns that its all-reduces cross the network
    sixteen = [
        f"trainer.device={device}",
        "generator.inference_engine.backend=vllm",
        "generator.inference_engine.tensor_parallel_size=16",
        "generator.inference_engine.num_engines=1",
        *[
            f"trainer.placement.{role}_num_{key}"
            for role in ("policy", "ref")
            for key in ("nodes=2", "gpus_per_node=8")
        ],
    ]
    assert problems_of(*sixteen) == []
    spanning = [w for w in warnings_of(*sixteen) if "span two nodes" in w]
    if device == "cuda":
        (warning,) = spanning
        assert "tensor_parallel_size=16" in warning and "divides 8" in warning
    else:  # auto on this CPU machine resolves to cpu: no vLLM engine spans anything
        assert spanning == []
    # 2 ranks per engine on nodes of 4: node-ordered bundles keep each engine on one node, nothing to say
    assert not [w for w in warnings_of(*vllm_tp, *two_nodes, "generator.inference_engine.num_engines=4") if "span" in w]


def test_vllm_only_sampling_kwargs_pass_validation_with_the_vllm_engine():
    overrides = [
        "generator.inference_engine.backend=vllm",
        "generator.sampling_params.additional_kwargs={presence_penalty: 0.5}",
    ]
    assert problems_of(*overrides) == []


def test_the_sglang_engine_passes_validation_on_gpu_with_its_own_sampling_kwargs():
    overrides = [
        "trainer.device=cuda",
        "generator.inference_engine.backend=sglang",
        "generator.sampling_params.additional_kwargs={presence_penalty: 0.5}",
    ]
    assert problems_of(*overrides) == []


TOKEN_BOUNDARY = [
    "trainer.mode=fully_async",
    "trainer.placement.colocate_all=false",
    "generator.inference_engine.num_engines=1",
    "trainer.async_rl.weight_update_boundary=token",
]


def test_the_token_boundary_passes_on_sglang_and_is_refused_on_an_engine_that_cannot_take_it():
    assert problems_of(*TOKEN_BOUNDARY, "trainer.device=cuda", "generator.inference_engine.backend=sglang") == []
    ENGINE_BUILDERS.add("my_engine", lambda settings: None)  # a user's backend: in-flight updates are not known
    try:
        found = problems_of(*TOKEN_BOUNDARY, "generator.inference_engine.backend=my_engine")
    finally:
        ENGINE_BUILDERS.unregister("my_engine")
    message = "weight_update_boundary=token is supported on the hf, vllm, sglang and remote engines, not on"
    assert any(message in problem for problem in found), found


def test_repetition_penalty_on_training_rollouts_warns_about_the_logprob_gap():
    with pytest.warns(ConfigWarning, match="rollout and trainer logprobs will differ"):
        SkyRLConfig.from_cli_overrides([*BASE, "generator.sampling_params.repetition_penalty=1.2"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)  # evaluation rollouts are never trained on: no warning
        SkyRLConfig.from_cli_overrides([*BASE, "generator.eval_sampling_params.repetition_penalty=1.2"])


@pytest.mark.parametrize("case", list(CASES))
def test_each_check_triggers_with_its_message(case):
    overrides, message = CASES[case]
    found = problems_of(*overrides)
    assert any(message in problem for problem in found), f"{message!r} not in {found}"


def test_validation_error_lists_every_problem():
    with pytest.raises(ConfigValidationError) as info:
        SkyRLConfig.from_cli_overrides([*BASE, "trainer.policy_mini_batch_size=6", "generator.max_turns=0"])
    problems = info.value.problems
    assert any("trainer.policy_mini_batch_size (6)" in problem for problem in problems)
    assert any("generator.max_turns must be at least 1, got 0" in problem for problem in problems)
    assert str(info.value).startswith(f"invalid config ({len(problems)} problem(s)):")


def test_critic_without_gae_is_a_warning_not_an_error():
    with pytest.warns(ConfigWarning, match="the critic is trained, but built-in estimators other than gae ignore"):
        cfg = SkyRLConfig.from_cli_overrides([*BASE, "trainer.critic.model.path=critic"])
    assert cfg.needs_critic


def test_ref_path_without_kl_is_a_warning():
    overrides = [*BASE, "trainer.algorithm.use_kl_loss=false", "trainer.ref.model.path=base"]
    with pytest.warns(ConfigWarning, match="no reference model is built"):
        assert SkyRLConfig.from_cli_overrides(overrides).needs_ref_model is False


def test_ppo_with_critic_and_gae_has_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        SkyRLConfig.from_cli_overrides(
            [*BASE, "trainer.critic.model.path=critic", "trainer.algorithm.advantage_estimator=gae"]
        )


def test_unused_roles_are_not_checked():
    # without KL the ref is not built, so its placement does not have to match the policy's
    assert problems_of("trainer.algorithm.use_kl_loss=false", "trainer.placement.ref_num_gpus_per_node=1") == []
    # without a critic its mini-batch size is irrelevant
    assert problems_of("trainer.critic_mini_batch_size=5") == []


def test_data_parallel_size_divides_by_sequence_parallelism():
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "trainer.placement.policy_num_nodes=2",
            "trainer.placement.policy_num_gpus_per_node=4",
            "trainer.policy.sequence_parallel_size=2",
        ],
        validate=False,
    )
    assert role_data_parallel_size(cfg, "policy") == 4  # 2 nodes * 4 GPUs / SP 2


def test_users_can_register_their_own_check(monkeypatch):
    def forbid_megatron(cfg):
        if cfg.trainer.strategy == "megatron":
            yield "trainer.strategy=megatron is not allowed on this cluster"

    monkeypatch.setattr("skyrl_train.config.validation.ERROR_CHECKS", [*ERROR_CHECKS, forbid_megatron])
    with pytest.raises(ConfigValidationError, match="not allowed on this cluster"):
        SkyRLConfig.from_cli_overrides(["trainer.strategy=megatron"])


def test_a_colocated_role_on_fewer_gpus_than_the_policy_is_valid_and_says_where_it_runs():
    """SkyRL runs a colocated critic or ref on fewer GPUs than the policy (the first of them); so does this project,
    and it says so once, as a forgotten `<role>_num_gpus_per_node` (default 1) puts a whole model on one GPU."""
    narrow = ["trainer.algorithm.use_kl_loss=true", "trainer.placement.ref_num_gpus_per_node=1"]
    assert problems_of(*narrow) == []
    with pytest.warns(ConfigWarning, match="the ref runs on 1 of the policy's 2 GPUs"):
        SkyRLConfig.from_cli_overrides([*BASE, *narrow])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)  # as wide as the policy: nothing to say
        SkyRLConfig.from_cli_overrides([*BASE, "trainer.algorithm.use_kl_loss=true"])
