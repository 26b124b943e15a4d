"""The agent config: YAML and dicts, unknown keys and bad values refused by name, backends checked."""

import pytest

from skyrl_agent import AgentConfigError, AgentRunner, load_agent_config
from skyrl_agent.backends import build_backend


def test_yaml_file_loads_into_typed_sections(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text(
        "agent_cls: react\ntask: tool_arithmetic\ntask_args: {digits: 3}\n"
        "generator: {max_iterations: 6, num_trajectories: 4, sampling_params: {max_tokens: 32, temperature: 0.7}}\n"
        "dispatcher: {type: batch, max_parallel_agents: 2}\n"
    )
    cfg = load_agent_config(path)
    assert (cfg.generator.max_iterations, cfg.generator.num_trajectories, cfg.dispatcher.type) == (6, 4, "batch")
    assert cfg.sampling_params().max_tokens == 32 and cfg.sampling_params().temperature == 0.7
    assert cfg.sampling_params(val_mode=True).temperature == 0.0  # eval_sampling_params' default: greedy


@pytest.mark.parametrize(
    "values, named",
    [
        ({"generator": {"max_iteration": 3}}, "generator.max_iteration"),
        ({"dispatcher": {"kind": "batch"}}, "dispatcher.kind"),
        ({"agent_class": "react"}, "agent_class"),
        ({"dispatcher": {"type": "pipeline"}}, "dispatcher.type"),
        ({"generator": {"backend": "vllm"}}, "generator.backend"),
        ({"generator": {"num_trajectories": 0}}, "generator.num_trajectories"),
        ({"generator": {"sampling_params": {"max_token": 3}}}, "generator.sampling_params"),
        ({"generator": {"sampling_params": {"n": 2}}}, "generator.sampling_params.n"),
        ({"agent": {"thinking": "drop"}}, "agent.thinking"),
        ({"agent": {"tool_timeout_s": 0}}, "agent.tool_timeout_s"),
        ({"agent_cls": "reactt"}, "agent_cls"),
        ({"task": "nope"}, "task"),
        ({"tools": ["calculator", "abacus"]}, "tools[1]"),
        ({"generator": "fast"}, "generator"),
    ],
)
def test_bad_keys_and_values_are_refused_by_name(values, named):
    with pytest.raises(AgentConfigError) as info:
        load_agent_config(values)
    assert named in str(info.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(AgentConfigError, match="nope.yaml"):
        load_agent_config(tmp_path / "nope.yaml")


def test_the_backend_passed_in_must_be_the_configured_one(tokenizer):
    from skyrl_agent.testing import ScriptedBackend

    with pytest.raises(AgentConfigError, match="generator.backend is 'openai'"):
        AgentRunner({"generator": {"backend": "openai"}}, ScriptedBackend(tokenizer, lambda r: ""), tokenizer)


def test_backend_args_are_checked(tokenizer):
    with pytest.raises(ValueError, match="needs the trainer's engine client"):
        build_backend("skyrl_train", {}, tokenizer)
    with pytest.raises(ValueError, match=r"unknown keys \['url'\]"):
        build_backend("openai", {"url": "http://x"}, tokenizer)
    with pytest.raises(ValueError, match=r"needs \['model'\]"):
        build_backend("openai", {"base_url": "http://127.0.0.1:1/v1"}, tokenizer)
