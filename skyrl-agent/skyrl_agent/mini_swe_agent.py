"""SkyRL's mini-swe-agent integration: the `mini_swe_agent` rollout workflow (`generator.workflow=mini_swe_agent`).

    pip install -e "./skyrl-agent[miniswe]"     # mini-swe-agent 1.x, the version SkyRL's example is written for
    generator.workflow=mini_swe_agent generator.workflow_args.config_path=swebench.yaml \
        generator.workflow_args.traj_dir=trajs

SkyRL's `examples.mini_swe_agent.main_mini_swe` runs this (`+generator.miniswe_config_path`,
`+generator.miniswe_traj_dir`). Each trajectory runs mini-swe-agent's `DefaultAgent` on one SWE task instance (the
dataset row's `instance` column: `instance_id`, `problem_statement`, `eval_script`, optionally `image_name` or
`repo_files`), with the settings of the mini-swe-agent config file (its `agent`, `environment` and `run` sections):

- **environment**: `docker` / `singularity` run the instance's image (its `image_name`, or SWE-Gym's / SWE-bench's
  naming from the row's `data_source`); `local` runs the model's commands on this machine, unisolated, in a fresh
  git repository per trajectory holding the instance's `repo_files`. `run.env_startup_command` (a Jinja template over
  the instance's fields) runs first.
- **model**: the run's own engines, token in and token out: the system and task messages through the chat template
  are the prompt, each turn's tokens are kept as sampled (with their logprobs and weight version) and each
  observation's tokens are loss-masked. The config's `model` section (LiteLLM's settings) is not used; the turns
  sample with `generator.sampling_params`, and the context stops at `generator.max_input_length`.
- **reward**: after the agent submits, its patch is applied in a fresh environment and the instance's `eval_script`
  runs there: 1.0 when it exits 0; 0 when the agent never submits. A trajectory whose environment, agent or engine
  raised is kept out of training (its `env_error` names the exception).
- **trajectories** (with `traj_dir`): mini-swe-agent's JSON per trajectory, `<traj_dir>/batch_<k>/<id>_<n>.json`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import subprocess
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import skyrl_gym
from skyrl_agent.training import to_training_trajectory
from skyrl_agent.trajectory import AgentTrajectory
from skyrl_train.generators.chat import ObservationRenderer, prompt_token_ids
from skyrl_train.generators.types import Trajectory
from skyrl_train.generators.workflow import ROLLOUT_WORKFLOWS, RolloutWorkflow, WorkflowEngine
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams

logger = logging.getLogger(__name__)
OVERFLOW = "context_overflow"
ERROR = "error"

WORKFLOW = "mini_swe_agent"
INSTALL_HINT = "pip install -e './skyrl-agent[miniswe]' (mini-swe-agent>=1.12,<2)"
MODEL_TRANSPORT_KEYS = {"model_name", "model_class", "model_kwargs", "litellm_model_registry", "cost_tracking"}
"""Keys of a mini-swe-agent config's `model` section that only say how LiteLLM reaches a served model."""


def import_minisweagent() -> Any:
    """The `minisweagent` package (its start-up banner silenced), or an ImportError saying how to install it."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    try:
        import minisweagent
        from minisweagent.agents import default  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"generator.workflow={WORKFLOW} needs mini-swe-agent: {INSTALL_HINT}") from exc
    if not minisweagent.__version__.startswith("1."):
        raise ImportError(f"generator.workflow={WORKFLOW} needs mini-swe-agent 1.x, found {minisweagent.__version__}")
    return minisweagent


def load_miniswe_config(path: str) -> dict[str, Any]:
    """A mini-swe-agent config: a YAML path, or the name of one mini-swe-agent ships (e.g. `swebench`)."""
    import yaml

    import_minisweagent()
    from minisweagent.config import get_config_path

    try:
        resolved = get_config_path(path)
    except FileNotFoundError as exc:
        raise ValueError(f"generator.workflow_args.config_path={path!r}: {exc}") from exc
    config = yaml.safe_load(resolved.read_text()) or {}
    if not isinstance(config, dict):
        raise ValueError(f"generator.workflow_args.config_path={path!r} is not a YAML mapping")
    unknown = sorted(set(config) - {"agent", "environment", "model", "run"})
    if unknown:
        raise ValueError(f"the mini-swe-agent config {resolved} has unknown sections {unknown}")
    return config


def docker_image_name(instance: dict[str, Any], data_source: str) -> str:
    """The container image of a SWE task: the instance's `image_name`, else SWE-Gym's or SWE-bench's published
    image for its `instance_id` (docker names may not hold `__`: each benchmark spells it its own way)."""
    if instance.get("image_name"):
        return str(instance["image_name"])
    instance_id, source = str(instance["instance_id"]), data_source.lower()
    if "swe-gym" in source:
        return f"docker.io/xingyaoww/sweb.eval.x86_64.{instance_id.replace('__', '_s_')}:latest".lower()
    if "swe-bench" in source:
        return f"docker.io/swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest".lower()
    raise ValueError(
        f"instance {instance_id!r}: no image_name, and data_source {data_source!r} is neither SWE-Gym nor SWE-bench"
    )


class TaskEnvironment:
    """One mini-swe-agent environment for one instance (see the module docstring), closed with `close()`."""

    def __init__(self, config: dict[str, Any], instance: dict[str, Any], data_source: str) -> None:
        from jinja2 import Template

        import_minisweagent()
        from minisweagent.environments import get_environment

        settings = dict(config.get("environment") or {})
        kind = settings.setdefault("environment_class", "docker")
        self.workdir: Optional[str] = None
        if kind == "docker":
            settings["image"] = docker_image_name(instance, data_source)
        elif kind == "singularity":
            settings["image"] = f"docker://{docker_image_name(instance, data_source)}"
        elif kind == "local":
            self.workdir = settings["cwd"] = make_local_repo(instance)
        self.env = get_environment(settings)
        startup = (config.get("run") or {}).get("env_startup_command")
        if startup:
            output = self.env.execute(Template(startup).render(**instance))
            if output["returncode"] != 0:
                self.close()
                raise RuntimeError(f"the environment's startup command failed: {output['output'][-1000:]}")

    def close(self) -> None:
        """Stop the container or remove the local repository."""
        cleanup = getattr(self.env, "cleanup", None) if hasattr(self, "env") else None
        if cleanup is not None:
            cleanup()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def make_local_repo(instance: dict[str, Any]) -> str:
    """A fresh git repository holding the instance's `repo_files` (path -> text), committed: the `local`
    environment's working directory."""
    files = instance.get("repo_files")
    if not isinstance(files, dict) or not files:
        raise ValueError(
            f"instance {instance.get('instance_id')!r}: environment_class=local needs the instance's repo_files "
            "(a mapping of path to file text)"
        )
    root = tempfile.mkdtemp(prefix="miniswe-")
    for name, text in files.items():
        path = Path(root, name)
        if Path(root).resolve() not in path.resolve().parents:
            shutil.rmtree(root, ignore_errors=True)
            raise ValueError(f"instance {instance.get('instance_id')!r}: repo file {name!r} is outside the repository")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git = ["git", "-c", "user.name=skyrl", "-c", "user.email=skyrl@localhost", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run([*git, *args], cwd=root, check=True, capture_output=True)
    return root


def evaluate_patch(
    config: dict[str, Any], instance: dict[str, Any], data_source: str, patch: str
) -> tuple[bool, Optional[str]]:
    """(resolved, error): `patch` applied in a fresh environment, then the instance's `eval_script` run there."""
    try:
        environment = TaskEnvironment(config, instance, data_source)
    except Exception as exc:  # the container or repository could not be made: no reward, the reason recorded
        return False, f"the evaluation environment failed: {exc}"
    try:
        delimiter = f"PATCH_{uuid.uuid4().hex}"
        applied = environment.env.execute(f"git apply <<'{delimiter}'\n{patch}\n{delimiter}")
        if applied["returncode"] != 0:
            return False, f"git apply failed: {applied['output'][-1000:]}"
        delimiter = f"EVAL_{uuid.uuid4().hex}"
        result = environment.env.execute(f"bash <<'{delimiter}'\n{instance['eval_script']}\n{delimiter}", timeout=3600)
        if result["returncode"] != 0:
            return False, f"the eval script exited {result['returncode']}: {result['output'][-1000:]}"
        return True, None
    finally:
        environment.close()


@dataclass
class EngineModelConfig:
    """What mini-swe-agent's templates and trajectory files see of the model."""

    model_name: str = "skyrl-train engines"


class EngineModel:
    """mini-swe-agent's `Model` over the run's engines, token in and token out (called from the agent's thread;
    each turn is awaited on the event loop the engines run on). Raises the agent's `LimitsExceeded` when the context
    is full."""

    def __init__(
        self,
        engine: WorkflowEngine,
        loop: asyncio.AbstractEventLoop,
        params: SamplingParams,
        renderer: ObservationRenderer,
        trajectory: AgentTrajectory,
        seed: Optional[int],
    ) -> None:
        self.engine, self.loop, self.params, self.renderer = engine, loop, params, renderer
        self.trajectory, self.seed = trajectory, seed
        self.config = EngineModelConfig()
        self.cost, self.n_calls = 0.0, 0
        self._seen = 0

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """The next assistant turn after `messages` (the agent's whole history)."""
        from minisweagent.agents.default import LimitsExceeded

        trajectory = self.trajectory
        if self._seen == 0:
            trajectory.prompt_ids = prompt_token_ids(self.engine.tokenizer, [plain(m) for m in messages])
        else:
            observations = [plain(m) for m in messages[self._seen + 1 :]]
            ids = self.renderer.continuation_ids(observations)
            generated = trajectory.response_ids
            ends_turn = generated and generated[-1] == self.renderer.eos_token_id
            trajectory.append(([] if ends_turn else [self.renderer.eos_token_id]) + ids, False)
        self._seen = len(messages)
        context = trajectory.prompt_ids + trajectory.response_ids
        room = self.engine.settings.max_input_length - len(context)
        if room <= 0:
            trajectory.stop_reason = OVERFLOW
            raise LimitsExceeded(f"the context reached {len(context)} tokens")
        params = replace(self.params, max_tokens=min(self.params.max_tokens, room), logprobs=True, n=1)
        seed = None if self.seed is None else self.seed + self.n_calls
        request = InferenceEngineInput(prompt_token_ids=[context], sampling_params=params, seeds=[seed])
        output = asyncio.run_coroutine_threadsafe(self.engine.agenerate(request), self.loop).result()
        ids = list(output.response_ids[0])
        logprobs = list(output.response_logprobs[0]) if output.response_logprobs is not None else None
        trajectory.append(ids, True, logprobs, output.weight_version)
        trajectory.turns = self.n_calls = self.n_calls + 1
        return {"content": self.engine.tokenizer.decode(ids, skip_special_tokens=True)}

    def get_template_vars(self) -> dict[str, Any]:
        """Variables mini-swe-agent's templates may use."""
        return {"model_name": self.config.model_name, "n_model_calls": self.n_calls, "model_cost": self.cost}


def plain(message: dict[str, Any]) -> dict[str, str]:
    """A chat message without the agent's bookkeeping fields (timestamps)."""
    return {"role": message["role"], "content": message["content"]}


@functools.cache
def reminder_agent_class() -> type:
    """mini-swe-agent's `DefaultAgent` that tells the model, after every observation, how many turns remain (as
    SkyRL's example does)."""
    from minisweagent.agents.default import DefaultAgent

    class ReminderAgent(DefaultAgent):
        """`DefaultAgent` with a turns-left reminder after each observation."""

        def get_observation(self, response: dict) -> dict:
            output = self.execute_action(self.parse_action(response))
            observation = self.render_template(self.config.action_observation_template, output=output)
            left = self.config.step_limit - self.model.n_calls
            if left == 1:
                observation += "\nREMINDER: You only have 1 turn left. Please provide the final answer"
            elif left > 1:
                observation += f"\nREMINDER: You have {left} turns left to arrive at the solution."
            self.add_message("user", observation)
            return output

    return ReminderAgent


class MiniSweAgentWorkflow(RolloutWorkflow):
    """The `mini_swe_agent` rollout workflow (see the module docstring). `config_path`: the mini-swe-agent config;
    `traj_dir`: where trajectory files go (none without it); `max_parallel_agents`: agents running at once."""

    def __init__(self, config_path: str, traj_dir: Optional[str] = None, max_parallel_agents: int = 32) -> None:
        import_minisweagent()
        if max_parallel_agents < 1:
            raise ValueError(f"generator.workflow_args.max_parallel_agents={max_parallel_agents}: expected >= 1")
        self.config = load_miniswe_config(config_path)
        self.config_path, self.traj_dir = config_path, traj_dir
        self.agent_settings = dict(self.config.get("agent") or {})
        self.configured_step_limit = int(self.agent_settings.get("step_limit") or 0)
        ignored = sorted(set(self.config.get("model") or {}) - MODEL_TRANSPORT_KEYS)
        if ignored:
            logger.warning(
                "mini-swe-agent config %s: model settings %s are not used; the agent samples from the run's engines "
                "with generator.sampling_params",
                config_path,
                ignored,
            )
        self.executor = ThreadPoolExecutor(max_parallel_agents, thread_name_prefix="miniswe")
        self.batches = 0
        self._renderers: dict[int, ObservationRenderer] = {}

    def step_limit(self, engine: WorkflowEngine) -> int:
        """The agent's turn limit: the config's `agent.step_limit`, or `generator.max_turns` when it sets none."""
        return self.configured_step_limit or engine.settings.max_turns

    async def arun_batch(self, engine: WorkflowEngine, episodes: list[dict[str, Any]]) -> list[list[Trajectory]]:
        """Every prompt's agents, each in its own thread."""
        self.batches += 1
        configured, max_turns = self.configured_step_limit, engine.settings.max_turns
        if self.batches == 1 and configured and max_turns not in (1, configured):
            logger.warning(
                "generator.max_turns=%d is not used: agent.step_limit=%d of the mini-swe-agent config %s bounds the "
                "turns (max_turns applies when the config sets no step_limit)",
                max_turns,
                configured,
                self.config_path,
            )
        return list(await asyncio.gather(*(self.arun_episode(engine, data) for data in episodes)))

    async def arun_episode(self, engine: WorkflowEngine, data: dict[str, Any]) -> list[Trajectory]:
        """One row's `n` agents."""
        instance = data["env_extras"].get("instance")
        check_instance(instance, data["uid"])
        source = str(data["env_extras"].get("data_source") or "")
        seeds = data["seeds"] or [None] * data["n"]
        loop = asyncio.get_running_loop()
        runs = [
            loop.run_in_executor(self.executor, self.run_agent, engine, loop, data, instance, source, i, seeds[i])
            for i in range(data["n"])
        ]
        results = await asyncio.gather(*runs)
        trajectories = [to_training_trajectory(t, data["uid"], source or None) for t in results]
        # as SkyRL's generator: a finished agent "stops" however it ended; only a full context is cut by "length".
        # A failure (no container, a dead engine) says nothing about the model: the trajectory is kept out of training
        return [
            replace(
                t,
                env_class=data["env_class"],
                stop_reason="length" if a.stop_reason == OVERFLOW else "stop",
                env_error={"reason": ERROR, "detail": "; ".join(a.errors)} if a.stop_reason == ERROR else t.env_error,
            )
            for t, a in zip(trajectories, results)
        ]

    def run_agent(
        self,
        engine: WorkflowEngine,
        loop: asyncio.AbstractEventLoop,
        data: dict[str, Any],
        instance: dict[str, Any],
        source: str,
        index: int,
        seed: Optional[int],
    ) -> AgentTrajectory:
        """One agent, start to evaluation (runs in a worker thread)."""
        renderer = self._renderers.get(id(engine))
        if renderer is None:
            renderer = self._renderers[id(engine)] = ObservationRenderer(engine.tokenizer)
        trajectory = AgentTrajectory(str(instance["instance_id"]), index, prompt_ids=[])
        model = EngineModel(engine, loop, data["sampling_params"], renderer, trajectory, seed)
        settings = {**self.agent_settings, "step_limit": self.step_limit(engine)}
        agent, exit_status, submission, environment = None, "", "", None
        try:
            environment = TaskEnvironment(self.config, instance, source)
            agent = reminder_agent_class()(model, environment.env, **settings)
            exit_status, submission = agent.run(instance["problem_statement"])
        except Exception as exc:  # the environment, the agent or an engine failed: recorded, not trained on
            exit_status, submission = ERROR, str(exc)
            trajectory.errors.append(f"{type(exc).__name__}: {exc}")
            logger.warning("mini-swe-agent on %s failed: %s", instance["instance_id"], exc)
        finally:
            if environment is not None:
                environment.close()
        if exit_status == "Submitted":
            resolved, error = evaluate_patch(self.config, instance, source, submission)
            trajectory.reward = 1.0 if resolved else 0.0
            if error:
                trajectory.errors.append(error)
        if exit_status == ERROR:
            trajectory.stop_reason = ERROR
        elif exit_status == "Submitted":
            trajectory.stop_reason = "answer"
        else:
            trajectory.stop_reason = trajectory.stop_reason or exit_status
        if not trajectory.prompt_ids:  # the agent never asked the model: the row's prompt stands for its context
            trajectory.prompt_ids = prompt_token_ids(engine.tokenizer, data["prompt"])
        trajectory.messages = [plain(m) for m in agent.messages] if agent is not None else []
        self.save(agent, instance, index, exit_status, submission, trajectory)
        return trajectory

    def save(
        self,
        agent: Any,
        instance: dict[str, Any],
        index: int,
        exit_status: str,
        submission: str,
        trajectory: AgentTrajectory,
    ) -> None:
        """mini-swe-agent's trajectory file (with `traj_dir`)."""
        if not self.traj_dir or agent is None:
            return
        from minisweagent.run.utils.save import save_traj

        path = Path(self.traj_dir) / f"batch_{self.batches}" / f"{instance['instance_id']}_{index}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        error = "; ".join(trajectory.errors) or None
        save_traj(
            agent,
            path,
            print_path=False,
            exit_status=exit_status,
            result=submission,
            reward=trajectory.reward,
            eval_error=error,
        )


REQUIRED_INSTANCE_FIELDS = ("instance_id", "problem_statement", "eval_script")


def check_instance(instance: Any, uid: str) -> None:
    """Refuse a dataset row whose `instance` column is not a SWE task instance, naming the row and field."""
    if not isinstance(instance, dict):
        raise ValueError(
            f"dataset row uid={uid!r}: the {WORKFLOW} workflow needs an 'instance' column holding the task instance "
            f"(a mapping with {', '.join(REQUIRED_INSTANCE_FIELDS)}), got {type(instance).__name__}"
        )
    for key in REQUIRED_INSTANCE_FIELDS:
        if not isinstance(instance.get(key), str):
            raise ValueError(f"dataset row uid={uid!r}, column 'instance': field {key!r} must be a string")


ENV_CLASS = "null"
"""The env class of SWE task rows (SkyRL's SWE-Gym rows say `"null"`: no skyrl-gym env steps them)."""


class _SweRowsEnv(skyrl_gym.Env):
    """Stands for SWE task rows in the env registry; stepping it means the workflow was not selected."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"dataset rows of env_class {ENV_CLASS!r} are SWE task instances rolled out by the {WORKFLOW} workflow: "
            f"set generator.workflow={WORKFLOW} and generator.workflow_args.config_path=<mini-swe-agent config>"
        )


def local_task_rows(size: int, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """Dataset rows of SWE task instances that run with `environment_class: local`: skyrl-agent's `mini_swe`
    repositories (one seeded bug, hidden tests), as `repo_files` and an `eval_script` that runs the hidden tests."""
    from skyrl_agent.tasks.mini_swe import MiniSWETask

    rows = []
    for task in MiniSWETask().build_dataset(size, seed=seed, split=split):
        delimiter = "HIDDEN_TESTS"
        instance = {
            "instance_id": task["id"],
            "problem_statement": task["prompt"],
            "repo_files": task["files"],
            "eval_script": f"python - <<'{delimiter}'\n{task['hidden_tests']}{delimiter}\n",
        }
        rows.append(
            {
                "prompt": [{"role": "user", "content": task["prompt"]}],
                "env_class": ENV_CLASS,
                "data_source": "skyrl_agent/mini_swe_local",
                "instance": instance,
            }
        )
    return rows


def register() -> None:
    """Register the workflow and the env class of its rows (idempotent; importing this module does it)."""
    if WORKFLOW not in ROLLOUT_WORKFLOWS:
        ROLLOUT_WORKFLOWS.add(WORKFLOW, MiniSweAgentWorkflow)
    if ENV_CLASS not in skyrl_gym.registry:
        skyrl_gym.register(id=ENV_CLASS, entry_point=_SweRowsEnv)


register()
