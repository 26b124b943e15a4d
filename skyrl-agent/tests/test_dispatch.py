"""The three dispatchers: same trajectories, their concurrency bounds, and how stages interleave. The model is
`ScriptedBackend` (its turns take `delay_s`); tools are a real tool group whose calls take real time."""

import json
import threading
import time

import pytest

from skyrl_agent import AgentRunner, ToolArithmeticTask
from skyrl_agent.registry import register_tool_group
from skyrl_agent.testing import ScriptedBackend
from skyrl_gym.tools import ToolGroup, tool
from skyrl_train.models.tokenizer import build_char_tokenizer

EVENTS: list[tuple[str, str]] = []
LOCK = threading.Lock()
ACTIVE = {"now": 0, "peak": 0}


class SlowCalc(ToolGroup):
    """`slow`: sleeps `0.05 s`, records when it ran and how many ran at once."""

    def __init__(self) -> None:
        super().__init__("slowcalc")

    @tool
    def slow(self, tag: str) -> str:
        """Wait a little.

        Args:
            tag: who called.
        """
        with LOCK:
            EVENTS.append(("tool", tag))
            ACTIVE["now"] += 1
            ACTIVE["peak"] = max(ACTIVE["peak"], ACTIVE["now"])
        time.sleep(0.05)
        with LOCK:
            ACTIVE["now"] -= 1
        return "ok"


register_tool_group("slowcalc_dispatch_test")(SlowCalc)


def script(request) -> str:
    """Two tool turns, then the answer: the instance's id is the question."""
    tag = request.messages[1]["content"]
    with LOCK:
        EVENTS.append(("generate", tag))
    calls = sum(m["role"] == "tool" for m in request.messages)
    if calls < 2:
        return "<tool_call>" + json.dumps({"name": "slow", "arguments": {"tag": tag}}) + "</tool_call>"
    return "<answer>7</answer>"


def run(kind: str, width: int = 3, tools: int = 2, size: int = 6):
    EVENTS.clear()
    ACTIVE.update(now=0, peak=0)
    cfg = {
        "tools": ["slowcalc_dispatch_test"],
        "generator": {"sampling_params": {"max_tokens": 200}, "max_prompt_length": 4096, "num_trajectories": 2},
        "dispatcher": {"type": kind, "max_parallel_agents": width, "max_parallel_tools": tools, "progress": False},
    }
    tokenizer = build_char_tokenizer()
    backend = ScriptedBackend(tokenizer, script, delay_s=0.02)
    batch = [{"id": f"i{k}", "prompt": f"q{k}", "answer": 7} for k in range(size)]
    result = AgentRunner(cfg, backend, tokenizer).run(batch, seed=3)
    return result, backend, list(EVENTS), ACTIVE["peak"]


@pytest.mark.parametrize("kind", ["batch", "async_batch", "async_pipeline"])
def test_every_dispatcher_returns_every_trajectory_in_order(kind):
    result, backend, events, _ = run(kind)
    assert [(t.instance_id, t.index) for t in result.trajectories] == [(f"i{k}", j) for k in range(6) for j in range(2)]
    assert all(t.reward == 1.0 and t.turns == 3 and len(t.tool_calls) == 2 for t in result.trajectories)
    assert len(backend.requests) == 36
    assert result.metrics["agent/success_rate"] == 1.0 and result.metrics["agent/trajectories_per_s"] > 0


def test_batch_moves_each_group_in_lock_step():
    _, backend, events, _ = run("batch", width=4)
    kinds = "".join("g" if kind == "generate" else "t" for kind, _ in events)
    # 12 trajectories in 3 groups of 4; per group: 4 turns, 4 tool calls, 4 turns, 4 tool calls, 4 answering turns
    assert kinds == ("gggg" "tttt" "gggg" "tttt" "gggg") * 3
    assert backend.peak == 4


def test_async_batch_keeps_at_most_max_parallel_agents_in_flight():
    _, backend, _, tool_peak = run("async_batch", width=3)
    assert backend.peak <= 3 and tool_peak <= 3


def test_async_pipeline_bounds_each_stage_on_its_own():
    _, backend, _, tool_peak = run("async_pipeline", width=3, tools=2)
    assert backend.peak <= 3 and tool_peak <= 2
    assert backend.peak == 3  # the model stage filled up while others ran tools


def test_val_mode_uses_max_eval_parallel_agents(tokenizer):
    backend = ScriptedBackend(tokenizer, lambda r: "<answer>1</answer>", delay_s=0.02)
    cfg = {
        "dispatcher": {
            "type": "async_batch",
            "max_parallel_agents": 2,
            "max_eval_parallel_agents": 5,
            "progress": False,
        }
    }
    rows = ToolArithmeticTask().build_dataset(10, seed=1)
    AgentRunner(cfg, backend, tokenizer).run(rows, val_mode=True)
    assert backend.peak == 5
    backend.peak = 0
    AgentRunner(cfg, backend, tokenizer).run(rows)
    assert backend.peak == 2
