"""The Megatron optimizer settings (`trainer.<role>.megatron.optimizer_cpu_offload` and friends): what is refused,
what only warns, and SkyRL's `megatron_config.optimizer_config_kwargs.*` spelling of them."""

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.megatron_checks import check_megatron_optimizer, warn_inert_megatron_optimizer
from skyrl_train.config.validation import find_problems

MEGATRON = [
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
    return SkyRLConfig.from_cli_overrides(list(overrides), validate=False)


def test_full_cpu_offload_of_the_policy_is_a_valid_megatron_run():
    cfg = _config(*MEGATRON, *OFFLOAD, "trainer.policy.megatron.overlap_cpu_optimizer_d2h_h2d=true")
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
    cfg = _config(*MEGATRON, "trainer.algorithm.use_kl_loss=true", *overrides)
    problems = list(check_megatron_optimizer(cfg))
    assert len(problems) == 1 and expected in problems[0], problems


def test_offload_under_fsdp2_is_refused_as_read_only_by_megatron():
    cfg = _config("trainer.strategy=fsdp2", *OFFLOAD)
    assert any("read only with trainer.strategy=megatron (this run: fsdp2)" in p for p in find_problems(cfg))


def test_a_fraction_or_overlap_with_the_offload_off_warns_as_megatron_core_ignores_them():
    cfg = _config(
        *MEGATRON,
        "trainer.policy.megatron.optimizer_offload_fraction=1.0",
        "trainer.policy.megatron.overlap_cpu_optimizer_d2h_h2d=true",
    )
    assert list(check_megatron_optimizer(cfg)) == []
    warnings = list(warn_inert_megatron_optimizer(cfg))
    assert len(warnings) == 2
    assert "optimizer_offload_fraction=1.0 does nothing" in warnings[0] and "overlap_cpu" in warnings[1]


def test_skyrls_optimizer_config_kwargs_land_on_the_megatron_section():
    prefix = "trainer.policy.megatron_config.optimizer_config_kwargs"
    cfg = SkyRLConfig.from_cli_overrides(
        [
            *MEGATRON,
            f"{prefix}.optimizer_cpu_offload=true",
            f"{prefix}.optimizer_offload_fraction=0.5",
            f"{prefix}.overlap_cpu_optimizer_d2h_h2d=true",
            f"{prefix}.use_precision_aware_optimizer=true",
        ],
        validate=False,
    )
    megatron = cfg.trainer.policy.megatron
    assert megatron.optimizer_cpu_offload and megatron.overlap_cpu_optimizer_d2h_h2d
    assert megatron.use_precision_aware_optimizer and megatron.optimizer_offload_fraction == 0.5
    assert find_problems(cfg) == []
