"""The ReAct agent's loop on the tool-use arithmetic task: tool calls, observations, answers, and every way a turn
can go wrong (malformed call, unknown tool, a tool that raises or hangs, context overflow, too many turns). The model
is `ScriptedBackend` (conftest): these tests choose what the model says; everything else is the real code."""

import json
import time

import pytest

from skyrl_agent import AgentRunner
from skyrl_agent.registry import register_tool_group
from skyrl_agent.testing import SCRIPTED_LOGPROB as LOGPROB
from skyrl_agent.testing import ScriptedBackend
from skyrl_gym.tools import ToolGroup, tool


class Flaky(ToolGroup):
    """Tools that fail: `boom` raises, `hang` sleeps past any sensible time limit, `shout` returns a lot of text."""

    def __init__(self) -> None:
        super().__init__("flaky")

    @tool
    def boom(self) -> str:
        """Raise."""
        raise RuntimeError("the tool broke")

    @tool
    def hang(self) -> str:
        """Sleep a while."""
        time.sleep(3)
        return "late"

    @tool
    def shout(self) -> str:
        """Return a long text."""
        return "A" * 400


register_tool_group("flaky_test_tools")(Flaky)


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def solver(request) -> str:
    """Call calc on the question, then answer with what it returned."""
    last = request.messages[-1]
    if last["role"] == "user":
        return "I will compute." + call("calc", expression=last["content"])
    return f"<answer>{last['content']}</answer>"


def runner(tokenizer, script, **overrides) -> AgentRunner:
    cfg = {
        "dispatcher": {"progress": False},
        "generator": {"sampling_params": {"max_tokens": 200}, "max_prompt_length": 4096},
    }
    for section, values in overrides.items():
        cfg[section] = {**cfg.get(section, {}), **values} if isinstance(values, dict) else values
    return AgentRunner(cfg, ScriptedBackend(tokenizer, script), tokenizer)


INSTANCE = {"id": "q0", "prompt": "(37*48)-19", "answer": 1757}


def test_a_solved_instance_calls_the_tool_then_answers(tokenizer):
    (traj,) = runner(tokenizer, solver).run([INSTANCE]).trajectories
    assert (traj.reward, traj.stop_reason, traj.turns, traj.final_answer) == (1.0, "answer", 2, "1757")
    assert [(c.name, c.ok, c.output) for c in traj.tool_calls] == [("calc", True, "1757")]
    assert traj.errors == [] and traj.exact_tokens


def test_trajectory_tokens_are_the_sampled_tokens_and_the_rendered_observations(tokenizer):
    run = runner(tokenizer, solver)
    (traj,) = run.run([INSTANCE]).trajectories
    backend = run.backend
    # the second turn's context is exactly prompt + first turn + observation: no decode/re-encode of model tokens
    first_turn = backend.requests[1].prompt_ids[len(traj.prompt_ids) :]
    assert backend.requests[0].prompt_ids == traj.prompt_ids
    assert traj.response_ids[: len(first_turn)] == first_turn
    generated = [i for i, m in zip(traj.response_ids, traj.loss_mask) if m]
    sampled = [
        list(tokenizer.encode(t, add_special_tokens=False)) + [tokenizer.eos_token_id]
        for t in ("I will compute." + call("calc", expression="(37*48)-19"), "<answer>1757</answer>")
    ]
    assert generated == sampled[0] + sampled[1]
    assert len(traj.response_ids) == len(traj.loss_mask) == len(traj.logprobs) == len(traj.token_versions)
    assert all(lp == (LOGPROB if m else 0.0) for lp, m in zip(traj.logprobs, traj.loss_mask))
    # the whole sequence is what the chat template renders for the conversation (tool message included)
    rendered = tokenizer.apply_chat_template(
        traj.messages,
        tools=run.task.tool_groups(INSTANCE)
        and [g.get_tool("calc").openai_schema() for g in run.task.tool_groups(INSTANCE)],
        tokenize=False,
    )
    assert tokenizer.decode(traj.prompt_ids + traj.response_ids) + "\n" == rendered  # the template's last newline
    observation = tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask) if not m])
    assert "<|im_start|>tool\n1757<|im_end|>" in observation


@pytest.mark.parametrize(
    "first_turn, expected_error",
    [
        ("<tool_call>{calc: 1}</tool_call>", "not valid JSON"),
        (call("abacus", expression="1+1"), "unknown tool 'abacus'"),
        (call("calc", expr="1+1"), "invalid arguments for 'calc'"),
        (call("calc", expression="__import__('os')"), "is not allowed"),
        (call("boom"), "RuntimeError: the tool broke"),
        (call("hang"), "timed out after 0.3 s"),
    ],
)
def test_a_bad_call_becomes_an_error_observation_and_the_trajectory_goes_on(tokenizer, first_turn, expected_error):
    def script(request):
        return first_turn if request.messages[-1]["role"] == "user" else "<answer>0</answer>"

    run = runner(tokenizer, script, tools=["flaky_test_tools"], agent={"tool_timeout_s": 0.3})
    (traj,) = run.run([INSTANCE]).trajectories
    assert traj.stop_reason == "answer" and traj.turns == 2 and traj.reward == 0.0
    assert len(traj.errors) == 1 and expected_error in traj.errors[0], traj.errors
    (record,) = traj.tool_calls
    assert not record.ok and record.output.startswith("Error: ") and expected_error in record.output
    assert traj.messages[-2] == {"role": "tool", "content": record.output}  # the model read the error
    assert sum(traj.loss_mask) < len(traj.loss_mask)  # the error observation is not trained on


def test_an_observation_that_overflows_the_context_ends_the_trajectory(tokenizer):
    script = lambda request: call("shout")  # noqa: E731
    run = runner(tokenizer, script, tools=["flaky_test_tools"], generator={"max_prompt_length": 1300})
    (traj,) = run.run([INSTANCE]).trajectories
    assert traj.stop_reason == "context_overflow" and "observation would bring the context" in traj.errors[-1]
    assert len(traj.prompt_ids) + len(traj.response_ids) < 1300
    assert traj.loss_mask[-1] == 1  # the overflowing observation was not added


def test_a_turn_is_capped_by_the_room_left_in_the_context(tokenizer):
    run = runner(
        tokenizer, lambda r: "x" * 500, generator={"max_prompt_length": 600, "sampling_params": {"max_tokens": 400}}
    )
    (traj,) = run.run([INSTANCE]).trajectories
    assert run.backend.requests[0].params.max_tokens == 600 - len(traj.prompt_ids)
    assert traj.stop_reason == "length" and len(traj.prompt_ids) + len(traj.response_ids) == 600


def test_an_agent_that_never_answers_stops_at_max_iterations(tokenizer):
    run = runner(tokenizer, lambda r: call("calc", expression="1+1"), generator={"max_iterations": 3})
    (traj,) = run.run([INSTANCE]).trajectories
    assert (traj.stop_reason, traj.turns, len(traj.tool_calls)) == ("max_iterations", 3, 3)


def test_too_many_calls_in_one_turn_are_not_run_and_the_model_is_told(tokenizer):
    def script(request):
        return call("calc", expression="1+1") * 3 if request.messages[-1]["role"] == "user" else "<answer>2</answer>"

    run = runner(
        tokenizer, script, agent={"max_tool_calls_per_turn": 2}, generator={"sampling_params": {"max_tokens": 400}}
    )
    (traj,) = run.run([INSTANCE]).trajectories
    assert len(traj.tool_calls) == 2 and "1 more were not run" in traj.messages[-2]["content"]


def test_thinking_strip_rerenders_each_turn_without_earlier_thinking(tokenizer):
    def script(request):
        if request.messages[-1]["role"] == "user":
            return "<think>secret plan</think>" + call("calc", expression=request.messages[-1]["content"])
        return f"<answer>{request.messages[-1]['content']}</answer>"

    keep = runner(tokenizer, script)
    keep.run([INSTANCE])
    assert "secret plan" in tokenizer.decode(keep.backend.requests[1].prompt_ids)
    strip = runner(tokenizer, script, agent={"thinking": "strip"})
    (traj,) = strip.run([INSTANCE]).trajectories
    second_context = tokenizer.decode(strip.backend.requests[1].prompt_ids)
    assert "secret plan" not in second_context and "<|im_start|>tool\n1757" in second_context
    assert [s.prompt_ids for s in traj.turn_samples] == [r.prompt_ids for r in strip.backend.requests]
    assert traj.reward == 1.0


def test_num_trajectories_per_instance_and_val_mode(tokenizer):
    run = runner(tokenizer, solver, generator={"num_trajectories": 3})
    rows = [INSTANCE, {"id": "q1", "prompt": "5*5", "answer": 25}]
    result = run.run(rows)
    assert [(t.instance_id, t.index) for t in result.trajectories] == [
        ("q0", 0),
        ("q0", 1),
        ("q0", 2),
        ("q1", 0),
        ("q1", 1),
        ("q1", 2),
    ]
    assert result.metrics["agent/success_rate"] == 1.0 and result.metrics["agent/turns_mean"] == 2.0
    assert len(run.run(rows, val_mode=True).trajectories) == 2
    assert run.backend.requests[-1].params.temperature == 0.0  # eval_sampling_params


def test_a_bad_instance_is_refused_naming_its_row(tokenizer):
    with pytest.raises(ValueError, match="batch row 1: the instance has no 'prompt'"):
        runner(tokenizer, solver).run([INSTANCE, {"id": "x"}])
