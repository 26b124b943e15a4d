"""Trajectories per second of the three skyrl-agent dispatchers, side by side in one run.

The agent is the ReAct agent on tool-use arithmetic, sampling from the embedded agent model through skyrl-train's
`hf` engine in this process. Its `calc` tool runs each expression as a Python program in skyrl-gym's sandbox (a real
process with its limits), and the program also waits a seeded 0.05-0.8 s (`--max-delay`) the way a test suite or a remote API does:
tool time that varies from call to call, as it does for agents. `batch` moves groups of agents in lock step (a
group waits for its slowest call), `async_batch` lets each agent run on its own, `async_pipeline` gives up the model
slot while tools run. Goal: async_pipeline >= 1.4x batch.

    python benchmarks/agent_dispatch.py                    # 48 trajectories per dispatcher
    python benchmarks/agent_dispatch.py --instances 16 --width 8
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from typing import Any

import torch

from skyrl_agent import AgentRunner, SkyRLTrainBackend
from skyrl_agent.registry import TASKS, register_task
from skyrl_agent.tasks.arithmetic import ToolArithmeticTask, evaluate_expression
from skyrl_agent.warm_start import AgentWarmStartSettings, agent_config, get_agent_model
from skyrl_gym.sandbox import SandboxLimits, run_python
from skyrl_gym.tools import ToolGroup, ToolResult, tool

DISPATCHERS = ("batch", "async_batch", "async_pipeline")


class SandboxedCalc(ToolGroup):
    """`calc` run as a sandboxed program that also waits `delay_s` (seeded per call)."""

    max_delay_s = 0.8
    long_tail = False

    def __init__(self, seed: int) -> None:
        super().__init__("calculator")
        self.rng = random.Random(seed)

    @tool
    def calc(self, expression: str) -> ToolResult:
        """Integer arithmetic: + - * ( ).

        Args:
            expression: e.g. 3*(4+5)
        """
        try:
            evaluate_expression(expression)  # refuse what is not arithmetic before it reaches a program
        except ValueError as exc:
            return ToolResult("calc", False, error=str(exc))
        if self.long_tail:  # most calls quick, one in six slow: a test suite that sometimes runs long, a flaky API
            delay = self.max_delay_s if self.rng.random() < 1 / 6 else 0.05
        else:
            delay = self.rng.uniform(0.05, self.max_delay_s)
        program = f"import time\ntime.sleep({delay:.3f})\nprint({expression})\n"
        result = run_python(program, limits=SandboxLimits(timeout_s=5.0))
        if not result.ok:
            return ToolResult("calc", False, error=(result.stderr or result.error or "failed").strip()[-200:])
        return ToolResult("calc", True, output=result.stdout.strip())


class SandboxedArithmetic(ToolArithmeticTask):
    """tool_arithmetic whose calculator is `SandboxedCalc`."""

    calls = 0

    def tool_groups(self, instance: dict[str, Any]) -> list[ToolGroup]:
        SandboxedArithmetic.calls += 1
        return [SandboxedCalc(seed=hash((instance["id"], SandboxedArithmetic.calls)) & 0xFFFF)]


def run_once(kind: str, model_dir: str, rows: list[dict], width: int, tools: int) -> dict[str, float]:
    """One dispatcher over `rows`: trajectories/s, success, and the time split."""
    from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient
    from skyrl_train.models.loading import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    client = InferenceEngineClient([HFInferenceEngine(load_causal_lm(model_dir, dtype="float32"), tokenizer)])
    base = agent_config(AgentWarmStartSettings())
    cfg = {
        **base,
        "task": "sandboxed_arithmetic_bench",
        "dispatcher": {"type": kind, "max_parallel_agents": width, "max_parallel_tools": tools, "progress": False},
    }
    runner = AgentRunner(cfg, SkyRLTrainBackend(client, tokenizer), tokenizer)
    SandboxedArithmetic.calls = 0
    started = time.perf_counter()
    result = asyncio.run(runner.arun(rows, seed=0))
    seconds = time.perf_counter() - started
    metrics = result.metrics
    return {
        "seconds": seconds,
        "traj_per_s": len(result.trajectories) / seconds,
        "success": metrics["agent/success_rate"],
        "tool_calls": metrics["agent/tool_calls_mean"],
        "tools_s": metrics["agent/tools_s_mean"],
        "generate_s": metrics["agent/generate_s_mean"],
    }


def main() -> None:
    """Run each dispatcher on the same instances and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=48)
    parser.add_argument("--width", type=int, default=16, help="max_parallel_agents")
    parser.add_argument("--tools", type=int, default=16, help="max_parallel_tools (async_pipeline)")
    parser.add_argument("--max-delay", type=float, default=0.8, help="tool wait drawn from 0.05 s to this")
    parser.add_argument(
        "--engine-threads",
        type=int,
        default=1,
        help="torch threads of the engine (1 default: the tools' processes need the other core; two threads that "
        "wait on each other while a tool holds a core make every decode step slower)",
    )
    parser.add_argument(
        "--long-tail",
        action="store_true",
        help="waits of 0.05 s, or --max-delay for one call in six, instead of uniform",
    )
    args = parser.parse_args()
    SandboxedCalc.max_delay_s, SandboxedCalc.long_tail = args.max_delay, args.long_tail
    torch.set_num_threads(args.engine_threads)
    if "sandboxed_arithmetic_bench" not in TASKS:
        register_task("sandboxed_arithmetic_bench")(SandboxedArithmetic)
    model_dir = str(get_agent_model(AgentWarmStartSettings()))
    rows = ToolArithmeticTask(digits=2, operations=1).build_dataset(args.instances, seed=0, split="bench")
    print(
        f"agent_dispatch: {args.instances} trajectories per dispatcher, max_parallel_agents={args.width}, "
        f"max_parallel_tools={args.tools}, tool wait 0.05-{args.max_delay:g} s "
        f"({'long tail' if args.long_tail else 'uniform'}) in the sandbox, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} engine thread(s)"
    )
    results = {kind: run_once(kind, model_dir, rows, args.width, args.tools) for kind in DISPATCHERS}
    baseline = results["batch"]["traj_per_s"]
    print(
        f"{'dispatcher':<16}{'seconds':>9}{'traj/s':>9}{'vs batch':>10}{'success':>9}{'calls':>7}{'tools s':>9}"
        f"{'model s':>9}"
    )
    for kind, row in results.items():
        print(
            f"{kind:<16}{row['seconds']:>9.1f}{row['traj_per_s']:>9.2f}{row['traj_per_s'] / baseline:>9.2f}x"
            f"{row['success']:>9.2f}{row['tool_calls']:>7.2f}{row['tools_s']:>9.2f}{row['generate_s']:>9.2f}"
        )
    ratio = results["async_pipeline"]["traj_per_s"] / baseline
    print(f"agent_dispatch: async_pipeline / batch = {ratio:.2f}x (goal >= 1.4x)")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
