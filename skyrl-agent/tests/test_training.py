"""The training side without a training run: agent trajectories in the trainer's form, agent-config keys a run
supersedes refused, dataset rows, and the generic entrypoint's resolved config."""

import json

import pytest

import skyrl_agent.training  # noqa: F401
from skyrl_agent import AgentConfigError, AgentRunner, ToolArithmeticTask
from skyrl_agent.entrypoint import main as entrypoint
from skyrl_agent.testing import ScriptedBackend
from skyrl_agent.training import ENV_CLASS, AgentWorkflow, to_training_trajectory, write_dataset


def solved(tokenizer):
    def script(request):
        last = request.messages[-1]
        if last["role"] == "user":
            return '<tool_call>{"name": "calc", "arguments": {"expression": "' + last["content"] + '"}}</tool_call>'
        return f"<answer>{last['content']}</answer>"

    cfg = {"dispatcher": {"progress": False}, "generator": {"sampling_params": {"max_tokens": 200}}}
    row = ToolArithmeticTask().build_dataset(1, seed=2)[0]
    return AgentRunner(cfg, ScriptedBackend(tokenizer, script), tokenizer).run([row]).trajectories[0]


def test_a_trajectory_reaches_the_trainer_with_the_same_tokens_and_the_reward_on_its_last_generated_token(tokenizer):
    agent = solved(tokenizer)
    trained = to_training_trajectory(agent, uid="u1", data_source="src")
    assert trained.prompt_token_ids == agent.prompt_ids and trained.response_ids == agent.response_ids
    assert trained.loss_mask == agent.loss_mask and trained.rollout_logprobs == agent.logprobs
    last = max(i for i, m in enumerate(agent.loss_mask) if m)
    assert trained.token_rewards[last] == 1.0 and sum(trained.token_rewards) == 1.0
    assert (trained.stop_reason, trained.num_turns, trained.env_class, trained.data_source) == (
        "stop",
        2,
        ENV_CLASS,
        "src",
    )
    assert trained.env_metrics["tool_calls"] == 1.0 and trained.is_trained


def test_a_trajectory_with_no_generated_token_is_kept_out_of_training(tokenizer):
    agent = solved(tokenizer)
    agent.response_ids, agent.loss_mask, agent.logprobs, agent.token_versions = [], [], [], []
    agent.stop_reason = "context_overflow"
    trained = to_training_trajectory(agent, uid="u1")
    assert not trained.is_valid and trained.env_error["reason"] == "context_overflow"


@pytest.mark.parametrize(
    "section, values, run_key",
    [
        ("generator", {"sampling_params": {"max_tokens": 8}}, "generator.sampling_params"),
        ("generator", {"num_trajectories": 4}, "generator.n_samples_per_prompt"),
        ("generator", {"backend": "openai"}, "run's own engines"),
        ("agent", {"thinking": "strip"}, "thinking=strip is not supported in training"),
    ],
)
def test_agent_keys_a_training_run_supersedes_are_refused(section, values, run_key):
    with pytest.raises(AgentConfigError, match=run_key):
        AgentWorkflow({section: values})


def test_dataset_rows_carry_their_instance(tmp_path):
    path = write_dataset(ToolArithmeticTask(), 3, seed=0, split="train", path=tmp_path / "rows.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["env_class"] for row in rows] == [ENV_CLASS] * 3
    assert rows[0]["prompt"] == [{"role": "user", "content": rows[0]["instance"]["prompt"]}]


def test_the_entrypoint_resolves_a_run_for_any_agent_config(tmp_path, capsys):
    config = tmp_path / "agent.yaml"
    config.write_text("agent_cls: codeact\ntask: mini_swe\n")
    assert (
        entrypoint(["--agent-config", str(config), "--out", str(tmp_path), "--dry-run", "trainer.policy.model.path=/m"])
        == 0
    )
    out = capsys.readouterr().out
    assert 'workflow: "skyrl_agent"' in out and str(config) in out and "train.jsonl" in out
    config.write_text("generator: {num_trajectories: 3}\n")
    with pytest.raises(AgentConfigError, match="n_samples_per_prompt"):
        entrypoint(["--agent-config", str(config), "--dry-run", "trainer.policy.model.path=/m"])
