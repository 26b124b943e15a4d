"""Dispatchers: how many trajectories run at once and how their stages interleave.

- `batch`: groups of `max_parallel_agents` agents move in lock step: every agent's model turn, then every agent's
  tools, then the next turn; a group's slowest tool call holds up all of it.
- `async_batch`: every agent runs its own loop; at most `max_parallel_agents` trajectories are in flight.
- `async_pipeline`: model turns, tool calls and evaluations are separate stages with their own limits
  (`max_parallel_agents` turns waiting on the model, `max_parallel_tools` tool/evaluation stages); an agent frees
  its generation slot while its tools run, so the engine keeps sampling for others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Optional

from skyrl_agent.agents.base import BaseAgent
from skyrl_agent.trajectory import AgentTrajectory


class Progress:
    """A tqdm bar of finished trajectories (off when `enabled` is False)."""

    def __init__(self, total: int, enabled: bool, description: str) -> None:
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=description, unit="traj", leave=False)

    def done(self) -> None:
        """One more trajectory finished."""
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        """Close the bar."""
        if self.bar is not None:
            self.bar.close()


async def _finish(agent: BaseAgent) -> AgentTrajectory:
    started = time.monotonic()
    try:
        await agent.evaluate()
    finally:
        agent.trajectory.timing["evaluate_s"] = time.monotonic() - started
        agent.close()
    return agent.trajectory


async def run_batch(agents: list[BaseAgent], width: int, progress: Progress) -> list[AgentTrajectory]:
    """Lock step in groups of `width`."""
    results: list[AgentTrajectory] = []
    for start in range(0, len(agents), width):
        group = agents[start : start + width]
        await asyncio.gather(*(agent.initialize() for agent in group))
        while True:
            active = [agent for agent in group if not agent.done]
            if not active:
                break
            await asyncio.gather(*(agent.generate() for agent in active))
            acting = [agent for agent in active if not agent.done]
            await asyncio.gather(*(agent.execute_tools() for agent in acting))
        for trajectory in await asyncio.gather(*(_finish(agent) for agent in group)):
            results.append(trajectory)
            progress.done()
    return results


async def run_async_batch(agents: list[BaseAgent], width: int, progress: Progress) -> list[AgentTrajectory]:
    """Each agent on its own, `width` at a time."""
    slots = asyncio.Semaphore(width)

    async def one(agent: BaseAgent) -> AgentTrajectory:
        async with slots:
            await agent.initialize()
            while not agent.done:
                await agent.generate()
                if not agent.done:
                    await agent.execute_tools()
            trajectory = await _finish(agent)
        progress.done()
        return trajectory

    return list(await asyncio.gather(*(one(agent) for agent in agents)))


async def run_async_pipeline(
    agents: list[BaseAgent], width: int, tool_width: int, progress: Progress
) -> list[AgentTrajectory]:
    """Generation and tool/evaluation stages with separate limits; at most `width + tool_width` trajectories
    started and unfinished at once (so tools never wait on agents that have not been admitted)."""
    generation, tools, admitted = (asyncio.Semaphore(n) for n in (width, tool_width, width + tool_width))

    async def one(agent: BaseAgent) -> AgentTrajectory:
        async with admitted:
            await agent.initialize()
            while not agent.done:
                queued = time.monotonic()
                async with generation:
                    agent._add_time("wait_generate_s", queued)
                    await agent.generate()
                if agent.done:
                    break
                queued = time.monotonic()
                async with tools:
                    agent._add_time("wait_tools_s", queued)
                    await agent.execute_tools()
            async with tools:
                trajectory = await _finish(agent)
        progress.done()
        return trajectory

    return list(await asyncio.gather(*(one(agent) for agent in agents)))


DISPATCHERS: dict[str, Callable] = {
    "batch": run_batch,
    "async_batch": run_async_batch,
    "async_pipeline": run_async_pipeline,
}


async def dispatch(
    kind: str, agents: list[BaseAgent], width: int, tool_width: int, progress: Optional[Progress] = None
) -> list[AgentTrajectory]:
    """Run `agents` with the dispatcher `kind`; trajectories come back in the agents' order."""
    progress = progress or Progress(len(agents), False, "")
    try:
        if kind == "async_pipeline":
            return await run_async_pipeline(agents, width, tool_width, progress)
        return await DISPATCHERS[kind](agents, width, progress)
    finally:
        progress.close()
