"""`trainer.placement.allocation_mode`: AReaL-style placement strings expand into the placement keys, and strings the
trainer cannot run are refused with the reason."""

import re

import pytest

from skyrl_train.config import ConfigValidationError, SkyRLConfig
from skyrl_train.config.allocation import AllocationModeError, parse_allocation_mode


def _cfg(*overrides, validate=False):
    return SkyRLConfig.from_cli_overrides(["trainer.policy.model.path=/m", *overrides], validate=validate)


def test_separate_vllm_and_fsdp():
    cfg = _cfg("trainer.placement.allocation_mode=vllm:d2+fsdp:d2")
    engine, placement = cfg.generator.inference_engine, cfg.trainer.placement
    assert (engine.backend, engine.num_engines, engine.tensor_parallel_size) == ("vllm", 2, 1)
    assert (cfg.trainer.strategy, placement.colocate_all, placement.policy_num_gpus_per_node) == ("fsdp2", False, 2)


def test_colocated_quickstart_layout_passes_validation():
    cfg = _cfg("trainer.placement.allocation_mode=hf:d2|fsdp:d2", "trainer.device=cpu", validate=True)
    assert cfg.trainer.placement.colocate_all and cfg.generator.inference_engine.num_engines == 2
    assert cfg.trainer.placement.policy_num_gpus_per_node == 2
    again = SkyRLConfig.from_dict(cfg.to_dict())  # the worker-side rebuild applies it again without a clash
    assert again.trainer.placement.policy_num_gpus_per_node == 2


def test_megatron_tensor_parallelism():
    cfg = _cfg("trainer.placement.allocation_mode=sglang:d1t2+megatron:d2t2")
    assert cfg.generator.inference_engine.tensor_parallel_size == 2 and cfg.trainer.strategy == "megatron"
    assert cfg.trainer.placement.policy_num_gpus_per_node == 4
    assert cfg.trainer.policy.megatron.tensor_model_parallel_size == 2


@pytest.mark.parametrize(
    "text, message",
    [
        ("vllm:d2", "joined by `+` (separate) or `|` (colocated)"),
        ("vllm:x2+fsdp:d2", "is not `<name>:<dims>`"),
        ("tgi:d2+fsdp:d2", "engine 'tgi' is not one of"),
        ("vllm:d2+deepspeed:d2", "trainer 'deepspeed' is not one of"),
        ("hf:d1t2+fsdp:d2", "the hf engine has no tensor parallelism"),
        ("vllm:d2+fsdp:d2t2", "fsdp2 shards over data-parallel ranks only"),
        ("hf:d1|fsdp:d2", "must equal the trainer's"),
        ("vllm:d2p2+fsdp:d2", "`p` is not a dimension of this part"),
    ],
)
def test_bad_strings_name_the_problem(text, message):
    with pytest.raises(AllocationModeError, match=re.escape(message)):
        parse_allocation_mode(text)


def test_a_key_given_with_another_value_is_a_clash():
    with pytest.raises(ConfigValidationError, match="generator.inference_engine.num_engines=3 .the allocation gives 2"):
        _cfg("trainer.placement.allocation_mode=vllm:d2+fsdp:d2", "generator.inference_engine.num_engines=3")


def test_what_this_machine_cannot_run_is_refused_by_validation():
    with pytest.raises(ConfigValidationError, match="sglang needs a GPU"):
        _cfg("trainer.placement.allocation_mode=sglang:d1+fsdp:d1", "trainer.device=cpu", validate=True)
