"""The run config's `generator` and `environment` keys reach the engine sampling params and the generator settings.

Each key is set to a non-default value and must show up in what the run builds; the behaviour of the built values
is tested where they are used (sampling, engines, generator).
"""

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.generators.from_config import generator_settings_from_config, sampling_params_from_config


@pytest.mark.filterwarnings("ignore:generator.sampling_params.repetition_penalty")
@pytest.mark.parametrize("section", ["sampling_params", "eval_sampling_params"])
def test_every_sampling_key_reaches_the_engine_params(section):
    prefix = f"generator.{section}"
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "generator.inference_engine.backend=vllm",
            f"{prefix}.max_generate_length=77",
            f"{prefix}.temperature=0.7",
            f"{prefix}.top_p=0.9",
            f"{prefix}.top_k=20",
            f"{prefix}.min_p=0.05",
            f"{prefix}.repetition_penalty=1.3",
            f"{prefix}.stop=['</answer>']",
            f"{prefix}.logprobs=4",
            f"{prefix}.seed=11",
            f"{prefix}.additional_kwargs={{stop_token_ids: [3, 4], ignore_eos: true, presence_penalty: 0.5}}",
        ]
    )
    params = sampling_params_from_config(getattr(cfg.generator, section))
    assert (params.max_tokens, params.temperature, params.top_p, params.top_k) == (77, 0.7, 0.9, 20)
    assert (params.min_p, params.repetition_penalty, params.stop, params.seed) == (0.05, 1.3, ("</answer>",), 11)
    assert params.logprobs and params.top_logprobs == 4
    # engine-field kwargs become those fields; the rest stays an engine-specific extra
    assert params.stop_token_ids == (3, 4) and params.ignore_eos is True
    assert params.extra_kwargs == {"presence_penalty": 0.5}


@pytest.mark.parametrize(("logprobs", "expected"), [("null", (False, 0)), ("0", (True, 0)), ("2", (True, 2))])
def test_logprobs_null_zero_and_k(logprobs, expected):
    cfg = SkyRLConfig.from_cli_overrides([f"generator.sampling_params.logprobs={logprobs}"])
    params = sampling_params_from_config(cfg.generator.sampling_params)
    assert (params.logprobs, params.top_logprobs) == expected


def test_every_generator_and_environment_key_reaches_the_generator_settings():
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "generator.max_turns=3",
            "generator.max_input_length=900",
            "generator.step_wise_trajectories=true",
            "generator.retokenize_chat_history=true",
            "generator.zero_reward_on_non_stop=true",
            "generator.apply_overlong_filtering=true",
            "generator.chat_template_kwargs={enable_thinking: false}",
            "generator.sampling_params.temperature=0.5",
            "environment.max_env_workers=3",
            "environment.env_step_timeout_s=7.5",
            "environment.env_configs.search.topk=5",
        ]
    )
    settings = generator_settings_from_config(cfg)
    assert (settings.max_turns, settings.max_input_length, settings.step_wise_trajectories) == (3, 900, True)
    assert settings.zero_reward_on_non_stop and settings.apply_overlong_filtering and settings.retokenize_chat_history
    assert settings.chat_template_kwargs == {"enable_thinking": False}
    assert settings.sampling_params.temperature == 0.5
    assert (settings.max_env_workers, settings.env_step_timeout_s) == (3, 7.5)
    assert settings.env_configs == {"search": {"topk": 5}}
    batched = generator_settings_from_config(SkyRLConfig.from_cli_overrides(["generator.batched=true"]))
    assert batched.batched is True and batched.use_conversation_multi_turn is True
    one_message = SkyRLConfig.from_cli_overrides(["generator.use_conversation_multi_turn=false"])
    assert generator_settings_from_config(one_message).use_conversation_multi_turn is False
    # null max_input_length falls back to data.max_prompt_length
    fallback = SkyRLConfig.from_cli_overrides(["data.max_prompt_length=300"])
    assert generator_settings_from_config(fallback).max_input_length == 300
