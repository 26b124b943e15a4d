"""The Megatron workers' model refusals, found from the model's config before Ray starts (`megatron_preflight`)."""

import pytest
import ray

from skyrl_train.config import ConfigValidationError, SkyRLConfig
from skyrl_train.workers.strategy.megatron_preflight import adapted_modules, megatron_model_problems

ATTENTION_ONLY = "trainer.policy.model.lora.target_modules=[q_proj,k_proj,v_proj,o_proj]"


def _cfg(model_path, *overrides: str) -> SkyRLConfig:
    # validate=False: the megatron strategy's own checks want CUDA, which this machine has not
    return SkyRLConfig.from_cli_overrides(
        ["trainer.strategy=megatron", f"trainer.policy.model.path={model_path}", *overrides], validate=False
    )


@pytest.fixture
def saved(tmp_path, tiny_hf_config):
    """`saved(model_type, **overrides) -> folder` of a tiny HF config (no weights: the preflight reads none)."""

    def save(model_type, **overrides):
        folder = tmp_path / model_type
        tiny_hf_config(model_type, **overrides).save_pretrained(folder)
        return str(folder)

    return save


def test_lora_on_a_moe_model_is_refused_unless_it_adapts_the_attention_only(saved):
    moe = saved("qwen3_moe")
    (problem,) = megatron_model_problems(_cfg(moe, "trainer.policy.model.lora.rank=4"))  # peft's all-linear
    assert "LoRA adapters on mixture-of-experts layers" in problem and "'model.layers.0.mlp." in problem
    assert megatron_model_problems(_cfg(moe, "trainer.policy.model.lora.rank=4", ATTENTION_ONLY)) == []
    dense = saved("qwen3")
    assert megatron_model_problems(_cfg(dense, "trainer.policy.model.lora.rank=4")) == []


def test_peft_adapts_the_same_modules_on_the_meta_device_as_the_workers_do(tiny_hf_config):
    """The workers wrap the loaded model with peft; the preflight wraps one built on the meta device. Same modules."""
    from transformers import AutoModelForCausalLM

    from skyrl_train.models.lora import LoRASettings, apply_lora
    from skyrl_train.models.lora_state import parse_adapter_name

    config = tiny_hf_config("qwen3_moe")
    lora = _cfg("unused", "trainer.policy.model.lora.rank=4").trainer.policy.model.lora
    real = apply_lora(AutoModelForCausalLM.from_config(config), LoRASettings.from_config(lora))
    expected = sorted({parsed.module for name in real.state_dict() if (parsed := parse_adapter_name(name))})
    assert adapted_modules(config, lora) == expected
    assert any(".mlp.experts" in module or module.endswith(".mlp.gate") for module in expected)


def test_a_family_without_a_megatron_mapping_is_refused_naming_the_model_type_and_the_way_out(tmp_path):
    from transformers import Glm4MoeLiteConfig

    folder = tmp_path / "glm"
    Glm4MoeLiteConfig(num_hidden_layers=2, hidden_size=64, vocab_size=128).save_pretrained(folder)
    (problem,) = megatron_model_problems(_cfg(folder, "trainer.algorithm.use_kl_loss=false"))
    assert problem.startswith(f"trainer.policy.model.path={folder}: model_type='glm4_moe_lite' has no Megatron")
    assert "trainer.strategy=fsdp2" in problem


def test_parallel_sizes_and_router_settings_the_model_cannot_take_are_refused_per_role(saved):
    moe = saved("qwen3_moe")
    problems = megatron_model_problems(
        _cfg(
            moe,
            "trainer.algorithm.use_kl_loss=true",
            "trainer.policy.megatron.tensor_model_parallel_size=3",
            "trainer.ref.megatron.moe_router_score_function=sigmoid",
        )
    )
    assert any(p.startswith("trainer.policy.megatron.tensor_model_parallel_size=3 does not divide") for p in problems)
    assert any(p.startswith("trainer.ref.megatron.moe_router_score_function=sigmoid: qwen3_moe's") for p in problems)
    dense = saved("qwen3")
    (problem,) = megatron_model_problems(
        _cfg(dense, "trainer.algorithm.use_kl_loss=false", "trainer.policy.megatron.expert_model_parallel_size=2")
    )
    assert "expert_model_parallel_size=2 needs a mixture-of-experts model; qwen3 is dense" in problem


def test_a_lora_policy_checks_no_reference_workers_since_its_base_is_the_reference(saved):
    moe = saved("qwen3_moe")
    ref_misfit = ["trainer.algorithm.use_kl_loss=true", "trainer.ref.megatron.tensor_model_parallel_size=3"]
    assert megatron_model_problems(_cfg(moe, *ref_misfit, "trainer.policy.model.lora.rank=4", ATTENTION_ONLY)) == []
    (problem,) = megatron_model_problems(_cfg(moe, *ref_misfit))  # without LoRA the ref workers load it
    assert problem.startswith("trainer.ref.megatron.tensor_model_parallel_size=3 does not divide")


def test_nothing_is_checked_without_a_local_config_or_on_fsdp2(saved):
    assert megatron_model_problems(_cfg("nobody/not-a-model-here", "trainer.policy.model.lora.rank=4")) == []
    moe = saved("qwen3_moe")
    fsdp2 = _cfg(moe, "trainer.policy.model.lora.rank=4", "trainer.strategy=fsdp2")
    assert megatron_model_problems(fsdp2) == []


def test_the_experiment_refuses_before_ray_starts(saved):
    from skyrl_train.entrypoints.main_base import BasePPOExp

    was_running = ray.is_initialized()
    experiment = BasePPOExp(_cfg(saved("qwen3_moe"), "trainer.policy.model.lora.rank=4"))
    with pytest.raises(ConfigValidationError, match="LoRA adapters on mixture-of-experts layers"):
        experiment.prepare()
    assert ray.is_initialized() == was_running
