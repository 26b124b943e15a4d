"""Build the generator's settings and sampling params from the run config (`generator` and `environment`)."""

from __future__ import annotations

from typing import Any

from skyrl_train.config.generator import ENGINE_FIELD_SAMPLING_KWARGS, SamplingConfig
from skyrl_train.generators.skyrl_gym_generator import GeneratorSettings
from skyrl_train.inference.types import SamplingParams


def sampling_params_from_config(section: SamplingConfig) -> SamplingParams:
    """`generator.sampling_params` / `eval_sampling_params` as engine `SamplingParams`.

    `max_generate_length` is the per-turn token budget; `logprobs` set (not null) returns sampled-token logprobs and
    `logprobs: k > 0` also the top-k alternatives. `additional_kwargs` named in `ENGINE_FIELD_SAMPLING_KWARGS` set those
    engine fields; the others stay engine-specific extras (the vllm engine passes them to vLLM, hf refuses them).
    """
    stop = section.stop
    extra = dict(section.additional_kwargs)
    fields = {name: extra.pop(name) for name in ENGINE_FIELD_SAMPLING_KWARGS if name in extra}
    if "stop_token_ids" in fields:
        fields["stop_token_ids"] = tuple(fields["stop_token_ids"])
    return SamplingParams(
        max_tokens=section.max_generate_length,
        temperature=section.temperature,
        top_p=section.top_p,
        top_k=section.top_k,
        min_p=section.min_p,
        stop=tuple([stop] if isinstance(stop, str) else stop or ()),
        seed=section.seed,
        logprobs=section.logprobs is not None,
        top_logprobs=section.logprobs or 0,
        repetition_penalty=section.repetition_penalty,
        additional_kwargs=extra,
        **fields,
    )


def generator_settings_from_config(cfg: Any) -> GeneratorSettings:
    """The `SkyRLGymGenerator` settings of a `SkyRLConfig` (`generator.batched: auto` resolved)."""
    from skyrl_train.config.auto_settings import resolved

    cfg = resolved(cfg)
    generator, environment = cfg.generator, cfg.environment
    return GeneratorSettings(
        sampling_params=sampling_params_from_config(generator.sampling_params),
        max_turns=generator.max_turns,
        max_input_length=cfg.max_input_length,
        batched=generator.batched,
        step_wise_trajectories=generator.step_wise_trajectories,
        env_configs={name: dict(values) for name, values in environment.env_configs.items()},
        max_env_workers=environment.max_env_workers,
        env_step_timeout_s=environment.env_step_timeout_s,
        zero_reward_on_non_stop=generator.zero_reward_on_non_stop,
        apply_overlong_filtering=generator.apply_overlong_filtering,
        chat_template_kwargs=dict(generator.chat_template_kwargs),
        use_conversation_multi_turn=generator.use_conversation_multi_turn,
        retokenize_chat_history=generator.retokenize_chat_history,
    )
