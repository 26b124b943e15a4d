"""Validation of `trainer.strategy=megatron`: the `trainer.<role>.megatron` sizes, and the optimizer settings
(`optimizer_cpu_offload` and friends): what is refused, what only warns, and SkyRL's
`megatron_config.optimizer_config_kwargs.*` spelling of them."""

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.megatron_checks import check_megatron_optimizer, warn_inert_megatron_optimizer
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
OFFLOAD = [
    "trainer.policy.megatron.optimizer_cpu_offload=true",
    "trainer.policy.megatron.optimizer_offload_fraction=1.0",
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


def test_the_expert_grid_must_divide_the_ranks_of_a_pipeline_stage():
    tp2 = "trainer.policy.megatron.tensor_model_parallel_size=2"
    # 4 workers, tp=2: experts spread over 4 ranks (the tensor-parallel ones included) with whole experts (ETP 1)
    folded = (tp2, "trainer.policy.megatron.expert_model_parallel_size=4")
    assert _megatron_problems(*folded, "trainer.policy.megatron.expert_tensor_parallel_size=1") == []
    # ETP null means the tensor-parallel size: 4 * 2 = 8 > 4 ranks
    assert _megatron_problems(*folded) == [
        "trainer.policy.megatron: expert_model_parallel_size (4) * expert_tensor_parallel_size (2, null: the"
        " tensor-parallel size) = 8 must divide the policy's 4 ranks per pipeline stage"
    ]
    staged = "trainer.policy.megatron.pipeline_model_parallel_size=2"
    assert _megatron_problems(staged, "trainer.policy.megatron.expert_model_parallel_size=4") == [
        "trainer.policy.megatron: expert_model_parallel_size (4) * expert_tensor_parallel_size (1, null: the"
        " tensor-parallel size) = 4 must divide the policy's 2 ranks per pipeline stage"
    ]
    assert _megatron_problems("trainer.policy.megatron.expert_model_parallel_size=0") == [
        "trainer.policy.megatron.expert_model_parallel_size=0: parallel sizes must be at least 1"
    ]
    assert _megatron_problems("trainer.policy.megatron.expert_tensor_parallel_size=0") == [
        "trainer.policy.megatron.expert_tensor_parallel_size=0: parallel sizes must be at least 1 (or null)"
    ]


def test_ref_sizes_are_checked_only_when_the_ref_model_is_used():
    bad_ref = "trainer.ref.megatron.tensor_model_parallel_size=3"
    assert _megatron_problems(bad_ref, "trainer.algorithm.use_kl_loss=false") == []
    (problem,) = _megatron_problems(bad_ref, "trainer.algorithm.use_kl_loss=true")
    assert problem.startswith("trainer.ref.megatron: tensor (3)")


def test_pipeline_stages_are_accepted_and_context_parallelism_is_not_supported_yet():
    cfg = _config("trainer.policy.megatron.pipeline_model_parallel_size=2")
    assert find_problems(cfg) == []
    assert role_data_parallel_size(cfg, "policy") == 2  # 4 GPUs in stages of 2
    uneven = _config(
        "trainer.policy.megatron.pipeline_model_parallel_size=4",
        "trainer.policy.megatron.num_layers_in_first_pipeline_stage=1",
        "trainer.policy.megatron.num_layers_in_last_pipeline_stage=2",
    )
    assert find_problems(uneven) == []
    problems = _megatron_problems("trainer.policy.megatron.context_parallel_size=2")
    assert any(
        p.startswith("trainer.policy.megatron.context_parallel_size=2 is not supported here yet") for p in problems
    )


def test_uneven_stage_sizes_without_stages_or_below_one_are_refused_naming_the_key():
    (problem,) = _megatron_problems("trainer.policy.megatron.num_layers_in_last_pipeline_stage=3")
    assert problem.startswith("trainer.policy.megatron.num_layers_in_last_pipeline_stage=3: an uneven last pipeline")
    assert "needs pipeline_model_parallel_size above 1" in problem
    (problem,) = _megatron_problems(
        "trainer.policy.megatron.pipeline_model_parallel_size=2",
        "trainer.policy.megatron.num_layers_in_first_pipeline_stage=0",
    )
    assert "num_layers_in_first_pipeline_stage=0: a stage needs at least 1 decoder layer" in problem


def test_roles_the_megatron_workers_do_not_run_are_refused():
    problems = _megatron_problems("trainer.critic.model.path=critic", "trainer.algorithm.advantage_estimator=gae")
    assert "trainer.strategy=megatron does not run a critic yet" in problems[0]


def test_lora_on_the_megatron_policy_is_accepted_without_dropout():
    assert _megatron_problems("trainer.policy.model.lora.rank=8") == []
    problems = _megatron_problems("trainer.policy.model.lora.rank=8", "trainer.policy.model.lora.dropout=0.1")
    assert problems == [
        "trainer.policy.model.lora.dropout=0.1: LoRA dropout on the Megatron workers is not supported here"
        " (tensor-parallel ranks would draw different masks); set it to 0"
    ]


def test_sequence_packing_is_accepted_on_megatron_both_ways():
    for setting in ("auto", "true", "false"):
        assert _megatron_problems(f"trainer.remove_microbatch_padding={setting}") == [], setting


def test_full_cpu_offload_of_the_policy_is_a_valid_megatron_run():
    cfg = _config(*OFFLOAD, "trainer.policy.megatron.overlap_cpu_optimizer_d2h_h2d=true")
    assert find_problems(cfg) == []
    assert list(warn_inert_megatron_optimizer(cfg)) == []
    assert cfg.trainer.policy.megatron.optimizer_offload_fraction == 1.0


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (
            ["trainer.policy.megatron.optimizer_offload_fraction=1.5"],
            "optimizer_offload_fraction=1.5: expected a share",
        ),
        (["trainer.policy.megatron.optimizer_cpu_offload=true"], "optimizer_offload_fraction=0 offloads nothing"),
        (
            ["trainer.ref.megatron.optimizer_cpu_offload=true", "trainer.ref.megatron.optimizer_offload_fraction=1"],
            "trainer.ref.megatron: the reference model has no optimizer",
        ),
    ],
)
def test_settings_that_cannot_work_are_refused_naming_the_key(overrides, expected):
    cfg = _config("trainer.algorithm.use_kl_loss=true", *overrides)
    problems = list(check_megatron_optimizer(cfg))
    assert len(problems) == 1 and expected in problems[0], problems


def test_offload_under_fsdp2_is_refused_as_read_only_by_megatron():
    cfg = SkyRLConfig.from_cli_overrides(["trainer.strategy=fsdp2", *OFFLOAD], validate=False)
    assert any("read only with trainer.strategy=megatron (this run: fsdp2)" in p for p in find_problems(cfg))


def test_a_fraction_or_overlap_with_the_offload_off_warns_as_megatron_core_ignores_them():
    cfg = _config(
        "trainer.policy.megatron.optimizer_offload_fraction=1.0",
        "trainer.policy.megatron.overlap_cpu_optimizer_d2h_h2d=true",
    )
    assert list(check_megatron_optimizer(cfg)) == []
    warnings = list(warn_inert_megatron_optimizer(cfg))
    assert len(warnings) == 2
    assert "optimizer_offload_fraction=1.0 does nothing" in warnings[0] and "overlap_cpu" in warnings[1]


def test_skyrls_optimizer_config_kwargs_land_on_the_megatron_section():
    prefix = "trainer.policy.megatron_config.optimizer_config_kwargs"
    cfg = _config(
        f"{prefix}.optimizer_cpu_offload=true",
        f"{prefix}.optimizer_offload_fraction=0.5",
        f"{prefix}.overlap_cpu_optimizer_d2h_h2d=true",
        f"{prefix}.use_precision_aware_optimizer=true",
    )
    megatron = cfg.trainer.policy.megatron
    assert megatron.optimizer_cpu_offload and megatron.overlap_cpu_optimizer_d2h_h2d
    assert megatron.use_precision_aware_optimizer and megatron.optimizer_offload_fraction == 0.5
    assert find_problems(cfg) == []
