"""Rollout workflows: a user's episode function registered by name runs once per prompt through `engine.agenerate`,
what it returns is checked, the built-in env loop is the workflow `env`, and the run config selects a workflow."""

import asyncio

import pytest

from skyrl_train.config import ConfigValidationError, SkyRLConfig
from skyrl_train.config.registered_names import check_registered_names
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.generators import GeneratorInput, GeneratorSettings, SkyRLGymGenerator
from skyrl_train.generators.chat import prompt_token_ids
from skyrl_train.generators.types import Trajectory
from skyrl_train.generators.workflow import (
    ROLLOUT_WORKFLOWS,
    RolloutWorkflow,
    WorkflowGenerator,
    make_workflow_generator,
    register_workflow,
)
from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient, SamplingParams
from skyrl_train.inference.types import InferenceEngineInput
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

PARAMS = SamplingParams(max_tokens=5, temperature=1.0)


class TwoTries(RolloutWorkflow):
    """Ask twice; the second try sees the first (after `hint`); reward 1 when the second answer has a digit."""

    def __init__(self, hint: str = "\nagain:") -> None:
        self.hint = hint

    async def arun_episode(self, engine, data):
        tokenizer = engine.tokenizer
        prompt = prompt_token_ids(tokenizer, data["prompt"], None, {})
        trajectories = []
        for sample in range(data["n"]):
            seed = None if data["seeds"] is None else data["seeds"][sample]
            params = data["sampling_params"]
            first = await engine.agenerate(InferenceEngineInput(prompt_token_ids=[prompt], sampling_params=params))
            hint = list(tokenizer(self.hint)["input_ids"])
            context = prompt + first.response_ids[0] + hint
            second = await engine.agenerate(
                InferenceEngineInput(prompt_token_ids=[context], sampling_params=params, seeds=[seed] if seed else None)
            )
            response = first.response_ids[0] + hint + second.response_ids[0]
            mask = [1] * len(first.response_ids[0]) + [0] * len(hint) + [1] * len(second.response_ids[0])
            logprobs = first.response_logprobs[0] + [0.0] * len(hint) + second.response_logprobs[0]
            reward = float(any(ch.isdigit() for ch in second.responses[0]))
            versions = [first.weight_version] * len(first.response_ids[0]) + [-1] * len(hint)
            versions += [second.weight_version] * len(second.response_ids[0])
            trajectories.append(
                Trajectory(
                    uid=data["uid"],
                    env_class=data["env_class"],
                    prompt_token_ids=prompt,
                    response_ids=response,
                    loss_mask=mask,
                    token_rewards=[0.0] * (len(response) - 1) + [reward],
                    rollout_logprobs=logprobs,
                    stop_reason=second.stop_reasons[0],
                    num_turns=2,
                    weight_version=second.weight_version,
                    token_versions=versions,
                )
            )
        return trajectories


class Short(RolloutWorkflow):
    async def arun_episode(self, engine, data):
        return []


@pytest.fixture(scope="module", autouse=True)
def workflows():
    register_workflow("two_tries")(TwoTries)
    register_workflow("short")(Short)
    yield
    for name in ("two_tries", "short"):
        ROLLOUT_WORKFLOWS.unregister(name)


@pytest.fixture(scope="module")
def client(tokenizer):
    return InferenceEngineClient([HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=2), tokenizer)])


def _input(count=4, samples=2):
    return GeneratorInput(
        prompts=[[{"role": "user", "content": f"{i}+1="}] for i in range(count) for _ in range(samples)],
        env_classes=["addition"] * count * samples,
        env_extras=[
            {"reward_spec": {"method": "rule", "ground_truth": str(i + 1)}}
            for i in range(count)
            for _ in range(samples)
        ],
        uids=[str(i) for i in range(count) for _ in range(samples)],
        seeds=list(range(count * samples)),
    )


def test_workflow_args_reach_the_workflows_constructor(tokenizer, client):
    base = ["trainer.policy.model.path=/m", "generator.workflow=two_tries"]
    cfg = SkyRLConfig.from_cli_overrides(base + ["generator.workflow_args.hint=once more:"])
    assert BasePPOExp(cfg).get_generator(client, tokenizer).workflow.hint == "once more:"
    wrong = SkyRLConfig.from_cli_overrides(base + ["generator.workflow_args.hints=x"])
    with pytest.raises(ValueError, match=r"generator.workflow_args=\{'hints': 'x'\} do not fit workflow 'two_tries'"):
        BasePPOExp(wrong).get_generator(client, tokenizer)
    with pytest.raises(ConfigValidationError, match="needs generator.workflow"):
        SkyRLConfig.from_cli_overrides(["trainer.policy.model.path=/m", "generator.workflow_args.hint=x"]).validate()


def test_a_users_workflow_runs_once_per_prompt(tokenizer, client):
    generator = make_workflow_generator("two_tries", client, tokenizer, GeneratorSettings(sampling_params=PARAMS))
    out = asyncio.run(generator.generate(_input()))
    assert [t.uid for t in out.trajectories] == [str(i) for i in range(4) for _ in range(2)]
    for t in out.trajectories:
        assert len(t.response_ids) == len(t.loss_mask) == len(t.rollout_logprobs) == len(t.token_versions)
        assert t.num_turns == 2 and 0 in t.loss_mask and t.oldest_version == 0
    assert out.metrics["generate/turns_mean"] == 2.0


def test_the_env_workflow_is_the_built_in_generator(tokenizer, client):
    settings = GeneratorSettings(sampling_params=SamplingParams(max_tokens=5, temperature=0.0))
    via_workflow = asyncio.run(make_workflow_generator("env", client, tokenizer, settings).generate(_input()))
    direct = asyncio.run(SkyRLGymGenerator(client, tokenizer, settings).generate(_input()))
    assert [t.response_ids for t in via_workflow.trajectories] == [t.response_ids for t in direct.trajectories]
    assert [t.reward for t in via_workflow.trajectories] == [t.reward for t in direct.trajectories]


def test_a_workflow_returning_the_wrong_count_is_named(tokenizer, client):
    generator = make_workflow_generator("short", client, tokenizer, GeneratorSettings(sampling_params=PARAMS))
    with pytest.raises(ValueError, match="workflow Short.arun_episode returned 0 trajectories for uid '0'"):
        asyncio.run(generator.generate(_input(count=1)))


def test_the_config_selects_a_registered_workflow(tokenizer, client):
    cfg = SkyRLConfig.from_cli_overrides(["trainer.policy.model.path=/m", "generator.workflow=two_tries"])
    assert isinstance(BasePPOExp(cfg).get_generator(client, tokenizer), WorkflowGenerator)
    typo = SkyRLConfig.from_cli_overrides(["trainer.policy.model.path=/m", "generator.workflow=two_trys"])
    with pytest.raises(
        ConfigValidationError, match="generator.workflow='two_trys' is not a registered rollout workflow"
    ):
        check_registered_names(typo)
