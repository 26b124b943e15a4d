"""`AgentRunner`: a batch of instances in, `num_trajectories` trajectories per instance out, through a dispatcher."""

from __future__ import annotations

import asyncio
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from skyrl_agent.agents.base import AgentContext
from skyrl_agent.backends import AgentBackend, build_backend
from skyrl_agent.config import AgentConfigError, AgentRunConfig, load_agent_config
from skyrl_agent.dispatch import Progress, dispatch
from skyrl_agent.registry import AGENTS, TASKS, TOOL_GROUPS, load_builtins
from skyrl_agent.trajectory import AgentTrajectory
from skyrl_train.generators.chat import ObservationRenderer
from skyrl_train.inference.types import SamplingParams

MAX_TOOL_THREADS = 256
"""The most threads a run's tool calls get (each waits on a process, a server or a file; few use a core)."""


@dataclass
class RunResult:
    """The trajectories of a run (instance order, then trajectory index) and its metrics."""

    trajectories: list[AgentTrajectory]
    metrics: dict[str, float] = field(default_factory=dict)


class AgentRunner:
    """Runs the configured agent on the configured task with `backend` (see `skyrl_agent.config`).

    A backend the runner built (`from_config` without one) is the runner's: `close()` / `await aclose()` (or a
    `with` block) closes it. A backend passed in stays the caller's to close."""

    def __init__(self, cfg: Union[AgentRunConfig, dict, str, Path], backend: AgentBackend, tokenizer: Any) -> None:
        self.cfg = load_agent_config(cfg)
        if backend.name != self.cfg.generator.backend:
            raise AgentConfigError(
                f"generator.backend is {self.cfg.generator.backend!r} but the backend passed in is {backend.name!r}"
            )
        load_builtins()
        self.backend, self.tokenizer = backend, tokenizer
        self.task = TASKS.get(self.cfg.task)(**self.cfg.task_args)
        self.agent_cls = AGENTS.get(self.cfg.agent_cls)
        self.extra_tool_groups = [TOOL_GROUPS.get(name) for name in self.cfg.tools]
        self.renderer = ObservationRenderer(tokenizer)
        self.owns_backend = False

    @classmethod
    def from_config(
        cls, source: Union[AgentRunConfig, dict, str, Path], tokenizer: Any, backend: Optional[AgentBackend] = None
    ) -> AgentRunner:
        """A runner whose backend is built from `generator.backend` and `generator.backend_args` (unless given)."""
        cfg = load_agent_config(source)
        if backend is not None:
            return cls(cfg, backend, tokenizer)
        runner = cls(cfg, build_backend(cfg.generator.backend, cfg.generator.backend_args, tokenizer), tokenizer)
        runner.owns_backend = True
        return runner

    async def arun(self, batch: list[dict[str, Any]], val_mode: bool = False, seed: Optional[int] = None) -> RunResult:
        """Every instance's trajectories (one each in `val_mode`). `seed` makes sampling reproducible: trajectory j
        of instance i samples turn t with seed `seed + 1000 * (i * n + j) + t`."""
        for row, instance in enumerate(batch):
            self.task.check_instance(instance, f"batch row {row}")
        n = 1 if val_mode else self.cfg.generator.num_trajectories
        specs = []
        for i, instance in enumerate(batch):
            for j in range(n):
                specs.append((instance, j, None if seed is None else seed + 1000 * (i * n + j)))
        dispatcher = self.cfg.dispatcher
        width = dispatcher.max_eval_parallel_agents if val_mode else dispatcher.max_parallel_agents
        started = time.monotonic()
        trajectories = await self.arun_agents(specs, self.cfg.sampling_params(val_mode), width)
        return RunResult(trajectories, run_metrics(trajectories, time.monotonic() - started))

    async def arun_agents(
        self, specs: list[tuple[dict[str, Any], int, Optional[int]]], params: SamplingParams, width: int
    ) -> list[AgentTrajectory]:
        """One trajectory per `(instance, index, seed)` with these turn sampling params, at most `width` agents in
        flight (the dispatcher's meaning of it); in the order of `specs`. Instances are not checked here."""
        dispatcher = self.cfg.dispatcher
        # Tool calls get threads of their own, as many as can run at once: in asyncio's default executor (a few
        # threads per core) slow tools would queue behind each other and behind anything else that uses it.
        stages = dispatcher.max_parallel_tools if dispatcher.type == "async_pipeline" else width
        tool_threads = min(MAX_TOOL_THREADS, stages * self.cfg.agent.max_tool_calls_per_turn)
        executor = ThreadPoolExecutor(tool_threads, thread_name_prefix="skyrl-agent-tools")
        ctx = AgentContext(
            self.cfg, self.task, self.backend, self.tokenizer, self.renderer, params, self.extra_tool_groups, executor
        )
        try:
            agents = [self.agent_cls(ctx, instance, index, seed) for instance, index, seed in specs]
            progress = Progress(len(agents), dispatcher.progress, f"agents ({dispatcher.type})")
            return await dispatch(dispatcher.type, agents, width, dispatcher.max_parallel_tools, progress)
        finally:
            executor.shutdown(wait=False)  # a tool abandoned at its timeout must not hold the run up

    def run(self, batch: list[dict[str, Any]], val_mode: bool = False, seed: Optional[int] = None) -> RunResult:
        """`arun` from synchronous code, in an event loop of its own (inside a running one, await `arun` instead).
        What the backend holds in that loop (`AgentBackend.release_loop`) is released before it closes, so the
        runner can run again."""
        self._check_no_running_loop("run", "await runner.arun(...)")
        return asyncio.run(self._run_in_own_loop(batch, val_mode, seed))

    async def _run_in_own_loop(self, batch: list[dict[str, Any]], val_mode: bool, seed: Optional[int]) -> RunResult:
        try:
            return await self.arun(batch, val_mode, seed)
        finally:
            await self.backend.release_loop()

    async def aclose(self) -> None:
        """Close the backend if the runner built it (`from_config` without a backend); else nothing."""
        if self.owns_backend:
            self.owns_backend = False
            await self.backend.close()

    def close(self) -> None:
        """`aclose` from synchronous code (inside a running event loop, await `aclose` instead)."""
        self._check_no_running_loop("close", "await runner.aclose()")
        asyncio.run(self.aclose())

    def __enter__(self) -> AgentRunner:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    async def __aenter__(self) -> AgentRunner:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    @staticmethod
    def _check_no_running_loop(method: str, instead: str) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise RuntimeError(f"AgentRunner.{method} was called inside a running event loop: use `{instead}`")


def run_metrics(trajectories: list[AgentTrajectory], seconds: float) -> dict[str, float]:
    """Rewards, turns, tool calls, stop reasons and per-stage time of a run."""
    if not trajectories:
        return {}
    count = len(trajectories)
    metrics = {
        "agent/reward_mean": statistics.fmean(t.reward for t in trajectories),
        "agent/success_rate": sum(t.reward > 0 for t in trajectories) / count,
        "agent/turns_mean": statistics.fmean(t.turns for t in trajectories),
        "agent/tool_calls_mean": statistics.fmean(len(t.tool_calls) for t in trajectories),
        "agent/tool_errors_mean": statistics.fmean(sum(not c.ok for c in t.tool_calls) for t in trajectories),
        "agent/response_tokens_mean": statistics.fmean(len(t.response_ids) for t in trajectories),
        "agent/trajectories_per_s": count / seconds if seconds > 0 else 0.0,
        "agent/run_seconds": seconds,
    }
    for reason in sorted({t.stop_reason for t in trajectories}):
        metrics[f"agent/stop_{reason}"] = sum(t.stop_reason == reason for t in trajectories) / count
    for key in ("generate_s", "tools_s", "evaluate_s", "wait_generate_s", "wait_tools_s"):
        metrics[f"agent/{key}_mean"] = statistics.fmean(t.timing.get(key, 0.0) for t in trajectories)
    return metrics
