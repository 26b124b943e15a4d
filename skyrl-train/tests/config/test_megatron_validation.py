"""Validation of `trainer.strategy=megatron` and the `trainer.<role>.megatron` sizes."""

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.validation import find_problems, role_data_parallel_size

BASE = [
    "trainer.strategy=megatron",
    "trainer.device=cuda",
    "trainer.train_batch_size=16",
    "trainer.policy_mini_batch_size=8",
    "generator.n_samples_per_prompt=4",
    "trainer.placement.policy_num_gpus_per_node=4",
    "trainer.placement.ref_num_gpus_per_node=4",
    "generator.inference_engine.num_engines=4",
]


def _config(*overrides: str) -> SkyRLConfig:
    return SkyRLConfig.from_cli_overrides([*BASE, *overrides], validate=False)


def _megatron_problems(*overrides: str) -> list[str]:
    return [p for p in find_problems(_config(*overrides)) if "megatron" in p.lower()]


def test_a_tp2_run_on_four_gpus_is_valid_and_has_two_data_parallel_ranks():
    cfg = _config("trainer.policy.megatron.tensor_model_parallel_size=2")
    assert find_problems(cfg) == []
    assert role_data_parallel_size(cfg, "policy") == 2
    # the same sizes under fsdp2 are not read: every worker is a data-parallel rank
    fsdp = _config("trainer.strategy=fsdp2", "trainer.policy.megatron.tensor_model_parallel_size=2")
    assert role_data_parallel_size(fsdp, "policy") == 4


def test_megatron_on_cpu_is_refused_naming_the_device():
    assert _megatron_problems("trainer.device=cpu") == [
        "trainer.strategy=megatron needs CUDA GPUs (megatron-core's forward runs on CUDA): use trainer.device=cuda"
    ]


def test_model_parallel_sizes_must_divide_the_workers():
    (problem,) = _megatron_problems("trainer.policy.megatron.tensor_model_parallel_size=3")
    assert problem.startswith("trainer.policy.megatron: tensor (3) * pipeline (1) * context (1) parallel sizes = 3")
    assert "must divide the policy's 4 workers" in problem


def test_expert_parallel_size_must_divide_the_data_parallel_ranks():
    (problem,) = _megatron_problems(
        "trainer.policy.megatron.tensor_model_parallel_size=2", "trainer.policy.megatron.expert_model_parallel_size=4"
    )
    assert problem.startswith(
        "trainer.policy.megatron.expert_model_parallel_size=4 must divide the policy's 2 data-parallel ranks"
    )
    assert "expert tensor parallelism, are not supported here" in problem
    assert _megatron_problems("trainer.policy.megatron.expert_model_parallel_size=0") == [
        "trainer.policy.megatron.expert_model_parallel_size=0: parallel sizes must be at least 1"
    ]


def test_ref_sizes_are_checked_only_when_the_ref_model_is_used():
    bad_ref = "trainer.ref.megatron.tensor_model_parallel_size=3"
    assert _megatron_problems(bad_ref, "trainer.algorithm.use_kl_loss=false") == []
    (problem,) = _megatron_problems(bad_ref, "trainer.algorithm.use_kl_loss=true")
    assert problem.startswith("trainer.ref.megatron: tensor (3)")


def test_pipeline_and_context_parallelism_are_not_supported_yet():
    problems = _megatron_problems(
        "trainer.policy.megatron.pipeline_model_parallel_size=2", "trainer.policy.megatron.context_parallel_size=2"
    )
    assert any(
        p.startswith("trainer.policy.megatron.pipeline_model_parallel_size=2 is not supported here yet")
        for p in problems
    )
    assert any(
        p.startswith("trainer.policy.megatron.context_parallel_size=2 is not supported here yet") for p in problems
    )


def test_roles_the_megatron_workers_do_not_run_are_refused():
    problems = _megatron_problems("trainer.critic.model.path=critic", "trainer.algorithm.advantage_estimator=gae")
    assert "trainer.strategy=megatron does not run a critic yet" in problems[0]
    lora = _megatron_problems("trainer.policy.model.lora.rank=8")
    assert any(
        "trainer.policy.model.lora.rank=8: LoRA on the Megatron workers is not supported here" in p for p in lora
    )


def test_sequence_packing_is_refused_on_megatron_only_when_insisted_on():
    assert _megatron_problems() == []  # remove_microbatch_padding=auto: Megatron runs padded micro-batches
    assert _megatron_problems("trainer.remove_microbatch_padding=false") == []
    (problem,) = _megatron_problems("trainer.remove_microbatch_padding=true")
    assert problem.startswith(
        "trainer.remove_microbatch_padding=true: sequence packing on the megatron workers is not supported here"
    )
    fsdp2 = _config("trainer.strategy=fsdp2", "trainer.remove_microbatch_padding=true")
    assert not [p for p in find_problems(fsdp2) if "remove_microbatch_padding" in p]
