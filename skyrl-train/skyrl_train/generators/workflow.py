"""Rollout workflows (AReaL-style): write one prompt's episode as an async function, register it by name, and every
trainer mode (sync, one_step_off, fully_async) trains on what it returns.

    @register_workflow("guess")
    class Guess(RolloutWorkflow):
        async def arun_episode(self, engine, data):
            ...  # await engine.agenerate(InferenceEngineInput(...)), call tools, score
            return [Trajectory(...) for _ in range(data["n"])]

and run with `generator.workflow=guess`. `data` is the prompt's dataset row as the trainer sees it: `prompt`
(messages), `env_class`, `env_extras` (the row's other columns), `uid`, `n` (samples wanted), `seeds` (one per
sample, or None) and `sampling_params`. The episode returns exactly `n` trajectories: token ids as the engine sampled
them, a loss mask that is 1 only on generated tokens, rollout logprobs, token versions (`engine.agenerate` reports
the serving version), rewards. The built-in multi-turn skyrl-gym env rollout is the workflow `env`.
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import replace
from typing import Any, Optional

from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.skyrl_gym_generator import GeneratorSettings, SkyRLGymGenerator
from skyrl_train.generators.types import GeneratorInput, GeneratorOutput, Trajectory
from skyrl_train.inference.types import InferenceEngineInput, InferenceEngineOutput, SamplingParams
from skyrl_train.utils.registry import Registry

ROLLOUT_WORKFLOWS = Registry("rollout workflow", '@register_workflow("name")')
"""Workflow name -> `RolloutWorkflow` subclass (built with no arguments)."""


def register_workflow(name: str, *, builtin: bool = False):
    """Class decorator registering a `RolloutWorkflow` subclass under `name` (`generator.workflow=<name>`)."""
    return ROLLOUT_WORKFLOWS.register(name, builtin=builtin)


class WorkflowEngine:
    """What a workflow generates with: `await agenerate(request)` over the run's engines, plus the tokenizer, the
    run's default sampling params and generator settings."""

    def __init__(self, client: Any, tokenizer: Any, settings: GeneratorSettings) -> None:
        self.client, self.tokenizer, self.settings = client, tokenizer, settings

    @property
    def sampling_params(self) -> SamplingParams:
        """The run's sampling params (`generator.sampling_params`)."""
        return self.settings.sampling_params

    async def agenerate(self, request: InferenceEngineInput) -> InferenceEngineOutput:
        """Generate through the run's engines; the output's `weight_version` is the version that produced it."""
        return await self.client.generate(request)


class RolloutWorkflow(abc.ABC):
    """One prompt's episode (see the module docstring)."""

    @abc.abstractmethod
    async def arun_episode(self, engine: WorkflowEngine, data: dict[str, Any]) -> list[Trajectory]:
        """The `data["n"]` trajectories of one prompt."""

    async def arun_batch(self, engine: WorkflowEngine, episodes: list[dict[str, Any]]) -> list[list[Trajectory]]:
        """Every prompt's trajectories, in order. The default runs `arun_episode` for all prompts at once; override
        it to schedule across prompts (one concurrency bound for the whole batch, say)."""
        return list(await asyncio.gather(*(self.arun_episode(engine, data) for data in episodes)))


@register_workflow("env", builtin=True)
class EnvRolloutWorkflow(RolloutWorkflow):
    """The built-in multi-turn skyrl-gym env rollout (`SkyRLGymGenerator`) as a workflow."""

    def __init__(self) -> None:
        self._generators: dict[int, SkyRLGymGenerator] = {}

    async def arun_episode(self, engine: WorkflowEngine, data: dict[str, Any]) -> list[Trajectory]:
        """Roll out the row's env `n` times."""
        generator = self._generators.get(id(engine))
        if generator is None:
            generator = self._generators[id(engine)] = SkyRLGymGenerator(
                engine.client, engine.tokenizer, engine.settings
            )
        n = data["n"]
        batch = GeneratorInput(
            prompts=[data["prompt"]] * n,
            env_classes=[data["env_class"]] * n,
            env_extras=[dict(data["env_extras"]) for _ in range(n)],
            uids=[data["uid"]] * n,
            sampling_params=data["sampling_params"],
            seeds=data["seeds"],
        )
        return (await generator.generate(batch)).trajectories


def episode_data(generator_input: GeneratorInput, indices: list[int], params: SamplingParams) -> dict[str, Any]:
    """The `data` a workflow gets for the rows `indices` (one prompt's samples) of a generator input."""
    first = indices[0]
    return {
        "prompt": generator_input.prompts[first],
        "env_class": generator_input.env_classes[first],
        "env_extras": dict(generator_input.env_extras[first]),
        "uid": generator_input.uids[first],
        "n": len(indices),
        "seeds": [generator_input.seeds[i] for i in indices] if generator_input.seeds is not None else None,
        "sampling_params": params,
    }


class WorkflowGenerator(GeneratorInterface):
    """The trainer's generator for `generator.workflow`: runs the workflow once per prompt (its samples share a uid),
    all prompts concurrently, and checks what each episode returns."""

    def __init__(self, workflow: RolloutWorkflow, client: Any, tokenizer: Any, settings: GeneratorSettings) -> None:
        self.workflow = workflow
        self.engine = WorkflowEngine(client, tokenizer, settings)
        self.name = type(workflow).__name__

    async def generate(self, generator_input: GeneratorInput) -> GeneratorOutput:
        """Every prompt's episode; trajectories in input order."""
        groups: dict[str, list[int]] = {}
        for index, uid in enumerate(generator_input.uids):
            groups.setdefault(uid, []).append(index)
        params = generator_input.sampling_params or self.engine.sampling_params
        episodes = [episode_data(generator_input, rows, params) for rows in groups.values()]
        results = await self.workflow.arun_batch(self.engine, episodes)
        if not isinstance(results, list) or len(results) != len(episodes):
            raise ValueError(
                f"workflow {self.name}.arun_batch returned {len(results) if isinstance(results, list) else results!r}"
                f" episodes for {len(episodes)} prompts"
            )
        trajectories = [t for data, episode in zip(episodes, results) for t in self._checked(data, episode)]
        lengths = [sum(t.loss_mask) for t in trajectories]
        metrics = {
            "generate/response_length_mean": sum(lengths) / max(len(lengths), 1),
            "generate/turns_mean": sum(t.num_turns for t in trajectories) / max(len(trajectories), 1),
        }
        return GeneratorOutput(trajectories, metrics)

    def _checked(self, data: dict[str, Any], trajectories: Any) -> list[Trajectory]:
        if not isinstance(trajectories, list) or len(trajectories) != data["n"]:
            count = len(trajectories) if isinstance(trajectories, list) else type(trajectories).__name__
            raise ValueError(
                f"workflow {self.name}.arun_episode returned {count} trajectories for uid {data['uid']!r}; "
                f"expected a list of n={data['n']}"
            )
        checked = []
        for index, trajectory in enumerate(trajectories):
            if not isinstance(trajectory, Trajectory):
                raise TypeError(
                    f"workflow {self.name}: trajectory {index} of uid {data['uid']!r} is a "
                    f"{type(trajectory).__name__}, expected skyrl_train.generators.types.Trajectory"
                )
            sizes = {len(trajectory.loss_mask), len(trajectory.token_rewards)}
            if trajectory.rollout_logprobs is not None:
                sizes.add(len(trajectory.rollout_logprobs))
            if sizes != {len(trajectory.response_ids)}:
                raise ValueError(
                    f"workflow {self.name}: trajectory {index} of uid {data['uid']!r} has response_ids, "
                    "loss_mask, token_rewards and rollout_logprobs of different lengths"
                )
            checked.append(trajectory if trajectory.uid == data["uid"] else replace(trajectory, uid=data["uid"]))
        return checked


def make_workflow(name: str, args: Optional[dict[str, Any]] = None) -> RolloutWorkflow:
    """The workflow registered as `name`, built with `args` (`generator.workflow_args`)."""
    workflow_cls: Optional[type] = ROLLOUT_WORKFLOWS.get(name)
    try:
        return workflow_cls(**(args or {}))
    except TypeError as exc:
        raise ValueError(f"generator.workflow_args={dict(args or {})} do not fit workflow {name!r}: {exc}") from exc


def make_workflow_generator(
    name: str,
    client: Any,
    tokenizer: Any,
    settings: GeneratorSettings,
    args: Optional[dict[str, Any]] = None,
    workflow: Optional[RolloutWorkflow] = None,
) -> WorkflowGenerator:
    """The generator of the workflow registered as `name`, built with `args` (or `workflow`, already built)."""
    return WorkflowGenerator(workflow or make_workflow(name, args), client, tokenizer, settings)
