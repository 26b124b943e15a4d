"""The `EngineSettings` fields the vllm and sglang builders pass by name are arguments those engines take."""

import inspect

from skyrl_train.inference.engine_builders import VLLM_ENGINE_FIELDS, EngineSettings
from skyrl_train.inference.sglang_convert import engine_kwargs
from skyrl_train.inference.vllm_engine import VLLMInferenceEngine


def test_serving_kwargs_map_the_settings_onto_arguments_both_engines_take():
    settings = EngineSettings("m", tokenizer_path="t", dtype="float16", max_batch_size=7, seed=3, enforce_eager=True)
    kwargs = settings.serving_engine_kwargs()
    assert kwargs["max_num_seqs"] == 7 and kwargs["tokenizer_path"] == "t" and kwargs["dtype"] == "float16"
    assert (kwargs["seed"], kwargs["enforce_eager"]) == (3, True)
    vllm_arguments = set(inspect.signature(VLLMInferenceEngine.__init__).parameters)
    assert set(kwargs) | set(VLLM_ENGINE_FIELDS) <= vllm_arguments
    assert set(kwargs) <= set(inspect.signature(engine_kwargs).parameters)
    assert not set(kwargs) & set(VLLM_ENGINE_FIELDS)  # no argument given twice
