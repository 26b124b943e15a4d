"""Training agents with skyrl-train: the `skyrl_agent` rollout workflow and the dataset rows it reads.

    import skyrl_agent.training  # registers the workflow `skyrl_agent` and the env class `skyrl_agent`
    write_dataset(task, size=256, seed=0, split="train", path="train.jsonl")
    # then train with: generator.workflow=skyrl_agent generator.workflow_args.config=agent.yaml
    #                  data.train_data=[train.jsonl] data.val_data=[test.jsonl]

Each dataset row carries its task instance (`instance` column); the trainer's prompts are repeated
`generator.n_samples_per_prompt` times, and the workflow runs that many agents per row on the run's own engines
(the `skyrl_train` backend), all rows' agents through one dispatcher. Trajectories go to the trainer as sampled:
prompt ids, the model's tokens (loss mask 1, their logprobs and weight versions) and the observations between turns
(mask 0); the reward sits on the last generated token. The run's `generator.sampling_params` (or
`eval_sampling_params`) sample each turn, so the agent config must leave its own sampling keys, `num_trajectories`
and `backend` at their defaults (it is refused otherwise, saying which run key to set instead).
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any, Optional, Union

import skyrl_gym
from skyrl_agent.backends import SkyRLTrainBackend
from skyrl_agent.config import AgentConfigError, AgentRunConfig, GeneratorSection, load_agent_config
from skyrl_agent.runner import AgentRunner
from skyrl_agent.tasks.base import Task
from skyrl_agent.trajectory import AgentTrajectory
from skyrl_train.generators.types import Trajectory
from skyrl_train.generators.workflow import ROLLOUT_WORKFLOWS, RolloutWorkflow, WorkflowEngine

ENV_CLASS = "skyrl_agent"
"""The env class of agent dataset rows (registered so the trainer's start-up checks know it)."""

_SUPERSEDED = {
    "sampling_params": "generator.sampling_params (and generator.eval_sampling_params) of the training run",
    "eval_sampling_params": "generator.eval_sampling_params of the training run",
    "num_trajectories": "generator.n_samples_per_prompt of the training run",
    "backend": "nothing: training always samples from the run's own engines (skyrl_train)",
    "backend_args": "nothing: training always samples from the run's own engines (skyrl_train)",
}
_STOP_FOR_TRAINER = {"answer": "stop", "no_action": "stop"}


def instance_row(instance: dict[str, Any], task: Task) -> dict[str, Any]:
    """The dataset row of one task instance."""
    return {
        "prompt": [{"role": "user", "content": task.user_message(instance)}],
        "env_class": ENV_CLASS,
        "data_source": f"skyrl_agent/{type(task).__name__}",
        "instance": instance,
    }


def write_dataset(task: Task, size: int, seed: int, split: str, path: Union[str, Path]) -> Path:
    """`size` instances of `task` as a JSONL file of dataset rows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for instance in task.build_dataset(size, seed=seed, split=split):
            out.write(json.dumps(instance_row(instance, task)) + "\n")
    return path


def check_training_config(cfg: AgentRunConfig) -> None:
    """Refuse agent-config keys that a training run's own keys supersede (they would be silently ignored)."""
    defaults = GeneratorSection()
    for item in fields(GeneratorSection):
        if item.name in _SUPERSEDED and getattr(cfg.generator, item.name) != getattr(defaults, item.name):
            raise AgentConfigError(
                f"generator.{item.name} of the agent config is not used in training; set {_SUPERSEDED[item.name]} "
                "instead and leave it out of the agent config"
            )
    if cfg.agent.thinking == "strip":
        raise AgentConfigError(
            "agent.thinking=strip is not supported in training yet: each turn would be its own sample (step-wise "
            "trajectories); use thinking=keep (one token-in/token-out sequence per trajectory)"
        )


def to_training_trajectory(trajectory: AgentTrajectory, uid: str, data_source: Optional[str] = None) -> Trajectory:
    """The trainer's form of one agent trajectory (no decode/re-encode: the same token lists); its weight version
    is the oldest that generated one of its tokens."""
    rewards = [0.0] * len(trajectory.response_ids)
    generated = [i for i, m in enumerate(trajectory.loss_mask) if m]
    error = None
    if generated:
        rewards[generated[-1]] = float(trajectory.reward)
    else:  # e.g. the prompt alone filled the context: nothing to train on, kept out of the statistics
        error = {"reason": trajectory.stop_reason or "empty", "detail": "; ".join(trajectory.errors)}
    versions = [v for v in trajectory.token_versions if v >= 0]
    return Trajectory(
        uid=uid,
        env_class=ENV_CLASS,
        prompt_token_ids=list(trajectory.prompt_ids),
        response_ids=list(trajectory.response_ids),
        loss_mask=list(trajectory.loss_mask),
        token_rewards=rewards,
        rollout_logprobs=list(trajectory.logprobs) if trajectory.logprobs is not None else None,
        stop_reason=_STOP_FOR_TRAINER.get(trajectory.stop_reason, "length"),
        num_turns=trajectory.turns,
        weight_version=min(versions) if versions else 0,
        env_metrics={
            "agent_stop_" + (trajectory.stop_reason or "none"): 1.0,
            "tool_calls": float(len(trajectory.tool_calls)),
            "tool_errors": float(sum(not c.ok for c in trajectory.tool_calls)),
        },
        env_error=error,
        data_source=data_source,
        response_text=trajectory.response_text,
        token_versions=list(trajectory.token_versions),
    )


class AgentWorkflow(RolloutWorkflow):
    """The `skyrl_agent` rollout workflow: `generator.workflow_args.config` is the agent config (a YAML path or a
    dict); every row's agents run through the config's dispatcher together."""

    def __init__(self, config: Optional[Union[str, dict[str, Any]]] = None) -> None:
        self.cfg = load_agent_config(config if config is not None else {})
        check_training_config(self.cfg)
        self._runners: dict[int, AgentRunner] = {}

    def runner(self, engine: WorkflowEngine) -> AgentRunner:
        """The runner over this engine's client (one per engine)."""
        runner = self._runners.get(id(engine))
        if runner is None:
            backend = SkyRLTrainBackend(engine.client, engine.tokenizer)
            runner = self._runners[id(engine)] = AgentRunner(self.cfg, backend, engine.tokenizer)
        return runner

    async def arun_episode(self, engine: WorkflowEngine, data: dict[str, Any]) -> list[Trajectory]:
        """One row's trajectories."""
        (trajectories,) = await self.arun_batch(engine, [data])
        return trajectories

    async def arun_batch(self, engine: WorkflowEngine, episodes: list[dict[str, Any]]) -> list[list[Trajectory]]:
        """All rows' agents through one dispatcher (its `max_parallel_agents` bounds the whole batch)."""
        runner = self.runner(engine)
        specs = []
        for data in episodes:
            instance = data["env_extras"].get("instance")
            runner.task.check_instance(instance, f"dataset row uid={data['uid']!r}, column 'instance'")
            seeds = data["seeds"] or [None] * data["n"]
            specs.extend((instance, index, seeds[index]) for index in range(data["n"]))
        params = episodes[0]["sampling_params"] if episodes else runner.cfg.sampling_params()
        greedy = params.temperature == 0.0
        dispatcher = runner.cfg.dispatcher
        width = dispatcher.max_eval_parallel_agents if greedy else dispatcher.max_parallel_agents
        results = await runner.arun_agents(specs, params, width)
        grouped, at = [], 0
        for data in episodes:
            chunk = results[at : at + data["n"]]
            at += data["n"]
            source = data["env_extras"].get("data_source")
            grouped.append([to_training_trajectory(t, data["uid"], source) for t in chunk])
        return grouped


class _AgentRowsEnv(skyrl_gym.Env):
    """Stands for agent dataset rows in the env registry; stepping it means the workflow was not selected."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"dataset rows of env_class {ENV_CLASS!r} are rolled out by the skyrl_agent workflow: set "
            "generator.workflow=skyrl_agent and generator.workflow_args.config=<agent config>"
        )


def register() -> None:
    """Register the workflow and the env class (idempotent; importing this module does it)."""
    if "skyrl_agent" not in ROLLOUT_WORKFLOWS:
        ROLLOUT_WORKFLOWS.add("skyrl_agent", AgentWorkflow)
    if ENV_CLASS not in skyrl_gym.registry:
        skyrl_gym.register(id=ENV_CLASS, entry_point=_AgentRowsEnv)


register()
