"""`generator.inference_engine.expert_parallel_size` reaches vLLM (`enable_expert_parallel`) and SGLang (`ep_size`)."""

import dataclasses

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.inference.engine_builders import EngineSettings, vllm_extra
from skyrl_train.inference.sglang_convert import engine_kwargs_from_settings

ON_GPUS = ["trainer.device=cuda", "trainer.placement.colocate_all=false"]


def _settings(*overrides: str) -> EngineSettings:
    cfg = SkyRLConfig.from_cli_overrides([*ON_GPUS, *overrides], validate=False)
    return EngineSettings.from_config(cfg, "/models/moe")


def test_expert_parallelism_turns_on_vllm_expert_parallel_over_the_tensor_parallel_ranks():
    settings = _settings(
        "generator.inference_engine.backend=vllm",
        "generator.inference_engine.tensor_parallel_size=4",
        "generator.inference_engine.expert_parallel_size=4",
    )
    assert settings.expert_parallel_size == 4
    assert vllm_extra(settings) == {"enable_expert_parallel": True}


def test_without_expert_parallelism_vllm_gets_no_switch_and_the_users_engine_kwargs_win():
    assert vllm_extra(_settings("generator.inference_engine.backend=vllm")) == {}
    settings = _settings(
        "generator.inference_engine.tensor_parallel_size=2",
        "generator.inference_engine.expert_parallel_size=2",
        "generator.inference_engine.engine_init_kwargs={enable_expert_parallel: false, quantization: fp8}",
    )
    assert vllm_extra(settings) == {"enable_expert_parallel": False, "quantization": "fp8"}


def test_expert_parallelism_sets_sglangs_ep_size():
    settings = _settings(
        "generator.inference_engine.backend=sglang",
        "generator.inference_engine.tensor_parallel_size=2",
        "generator.inference_engine.expert_parallel_size=2",
    )
    kwargs = engine_kwargs_from_settings(settings)
    assert (kwargs["tp_size"], kwargs["ep_size"]) == (2, 2)
    assert engine_kwargs_from_settings(_settings("generator.inference_engine.backend=sglang"))["ep_size"] == 1
    users = _settings(
        "generator.inference_engine.backend=sglang",
        "generator.inference_engine.tensor_parallel_size=2",
        "generator.inference_engine.expert_parallel_size=2",
        "generator.inference_engine.engine_init_kwargs={ep_size: 1}",
    )
    assert engine_kwargs_from_settings(users)["ep_size"] == 1  # engine_init_kwargs win, as for every SGLang argument


@pytest.mark.vllm
def test_the_vllm_switch_is_an_engine_argument_of_the_installed_vllm():
    arg_utils = pytest.importorskip(
        "vllm.engine.arg_utils", reason="vLLM is not installed: run `bash scripts/test_vllm.sh` (CPU build, own venv)"
    )
    settings = _settings(
        "generator.inference_engine.tensor_parallel_size=2", "generator.inference_engine.expert_parallel_size=2"
    )
    fields = {field.name: field for field in dataclasses.fields(arg_utils.EngineArgs)}
    for name, value in vllm_extra(settings).items():
        assert name in fields and isinstance(value, type(fields[name].default))
