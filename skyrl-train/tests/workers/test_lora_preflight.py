"""The policy's LoRA refusals, found from the model's config before Ray starts (`lora_preflight`), for every
strategy."""

import pytest
import ray

from skyrl_train.config import ConfigValidationError, SkyRLConfig
from skyrl_train.workers.lora_preflight import lora_model_problems

TIED_HEAD = "trainer.policy.model.lora.target_modules=[q_proj,lm_head]"


def _cfg(model_path, *overrides: str) -> SkyRLConfig:
    return SkyRLConfig.from_cli_overrides([f"trainer.policy.model.path={model_path}", *overrides], validate=False)


@pytest.fixture
def saved(tmp_path, tiny_hf_config):
    """`saved(tied) -> folder` of a tiny qwen2 config (no weights: the preflight reads none)."""

    def save(tied: bool) -> str:
        folder = tmp_path / ("tied" if tied else "untied")
        tiny_hf_config("qwen2", tie_word_embeddings=tied).save_pretrained(folder)
        return str(folder)

    return save


def test_an_adapter_on_tied_embeddings_is_refused_by_the_key_that_asks_for_it(saved):
    (problem,) = lora_model_problems(_cfg(saved(True), "trainer.policy.model.lora.rank=4", TIED_HEAD))
    assert problem.startswith("trainer.policy.model.lora.target_modules=['q_proj', 'lm_head'] puts LoRA adapters on")
    assert "tie_word_embeddings=true" in problem


def test_what_the_workers_accept_passes(saved):
    assert lora_model_problems(_cfg(saved(False), "trainer.policy.model.lora.rank=4", TIED_HEAD)) == []
    assert lora_model_problems(_cfg(saved(True), "trainer.policy.model.lora.rank=4")) == []  # all-linear
    assert lora_model_problems(_cfg(saved(True), TIED_HEAD)) == []  # rank 0: LoRA is off
    assert lora_model_problems(_cfg("no-such-org/no-such-model", "trainer.policy.model.lora.rank=4", TIED_HEAD)) == []


def test_a_target_the_model_lacks_is_refused_with_the_section_named(saved):
    (problem,) = lora_model_problems(
        _cfg(saved(False), "trainer.policy.model.lora.rank=4", "trainer.policy.model.lora.target_modules=[q_prj]")
    )
    assert problem.startswith("trainer.policy.model.lora: Target modules {'q_prj'} not found in the base model")


def test_a_config_with_no_causal_lm_class_is_left_to_the_workers(tmp_path):
    """A config transformers knows but has no causal-LM class for: the workers' load reports it, in its words."""
    from transformers import T5Config

    T5Config(num_layers=1, d_model=32, d_kv=8, d_ff=64, num_heads=2).save_pretrained(tmp_path)
    assert lora_model_problems(_cfg(str(tmp_path), "trainer.policy.model.lora.rank=4", TIED_HEAD)) == []


@pytest.mark.parametrize("strategy", ["fsdp2", "megatron"])
def test_the_experiment_refuses_before_ray_starts_and_names_it_once(saved, strategy):
    from skyrl_train.entrypoints.main_base import BasePPOExp

    was_running = ray.is_initialized()
    cfg = _cfg(saved(True), f"trainer.strategy={strategy}", "trainer.policy.model.lora.rank=4", TIED_HEAD)
    with pytest.raises(ConfigValidationError) as refused:
        BasePPOExp(cfg).prepare()
    assert str(refused.value).count("puts LoRA adapters on lm_head") == 1
    assert ray.is_initialized() == was_running
