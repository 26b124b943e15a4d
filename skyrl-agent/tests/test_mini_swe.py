"""The mini-SWE harness and the CodeAct agent on it: every generated repository's hidden tests fail as generated and
pass after the reference fix applied through the agent's own edit tool; an agent that fixes the bug with tools and
code earns 1.0; code an agent runs cannot change the repository, read the hidden tests, write outside its folder or
run forever. The model is `ScriptedBackend` (the test writes its turns); the sandbox and the tests run for real."""

import json

import pytest

from skyrl_agent import AgentRunner
from skyrl_agent.tasks.mini_swe import MODULE, MiniSWETask, RepoTools, run_hidden_tests
from skyrl_agent.testing import ScriptedBackend

pytestmark = pytest.mark.slow  # dozens of sandboxed programs


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.mark.parametrize("split, seed", [("train", 0), ("test", 1)])
def test_every_repo_fails_its_hidden_tests_until_the_reference_fix(split, seed):
    rows = MiniSWETask().build_dataset(12, seed=seed, split=split)
    assert len({row["files"][MODULE] for row in rows}) > 6  # varied repositories
    for row in rows:
        passed, output = run_hidden_tests(row["files"], row["hidden_tests"])
        assert not passed and "AssertionError" in output, row["id"]
        repo = RepoTools(row["files"])
        fix = row["reference_fix"]
        assert repo.call("edit_file", {"path": fix["path"], "old": fix["old"], "new": fix["new"]}).ok
        passed, output = run_hidden_tests(repo.files, row["hidden_tests"])
        assert passed, (row["id"], output)


def runner(tokenizer, script, **dispatcher) -> AgentRunner:
    cfg = {
        "agent_cls": "codeact",
        "task": "mini_swe",
        "generator": {"max_iterations": 6, "max_prompt_length": 8192, "sampling_params": {"max_tokens": 400}},
        "dispatcher": {"progress": False, **dispatcher},
    }
    return AgentRunner(cfg, ScriptedBackend(tokenizer, script), tokenizer)


def test_a_codeact_agent_that_views_edits_checks_and_finishes_is_rewarded(tokenizer):
    row = MiniSWETask().build_dataset(1, seed=3, split="test")[0]
    fix = row["reference_fix"]

    def script(request):
        turn = sum(m["role"] == "assistant" for m in request.messages)
        return [
            call("view_file", path=MODULE),
            call("edit_file", path=MODULE, old=fix["old"], new=fix["new"]),
            "Check:\n```python\nimport utils\nprint(sorted(n for n in dir(utils) if not n.startswith('_')))\n```",
            call("finish", summary="fixed the bug"),
        ][turn]

    (traj,) = runner(tokenizer, script).run([row]).trajectories
    assert (traj.reward, traj.stop_reason, traj.turns, traj.final_answer) == (1.0, "finish", 4, "fixed the bug")
    assert [c.name for c in traj.tool_calls] == ["view_file", "edit_file", "run_python"]
    assert all(c.ok for c in traj.tool_calls) and "1: def " in traj.tool_calls[0].output
    assert row["files"][MODULE] != traj.workspace["files"][MODULE]  # the instance itself is untouched


ESCAPES = {
    "overwrite": "open('utils.py', 'w').write('')\nprint('overwrote my copy')",
    "hidden": "print(open('test_hidden.py').read())",
    "outside": "open('/tmp/skyrl-agent-escape', 'w').write('x')",
    "forever": "while True:\n    pass",
}


def test_code_an_agent_runs_is_contained(tokenizer, tmp_path):
    row = MiniSWETask().build_dataset(1, seed=4, split="test")[0]
    programs = list(ESCAPES.values())

    def script(request):
        turn = sum(m["role"] == "assistant" for m in request.messages)
        return f"```python\n{programs[turn]}\n```" if turn < len(programs) else call("finish")

    (traj,) = runner(tokenizer, script).run([row]).trajectories
    overwrite, hidden, outside, forever = traj.tool_calls
    assert overwrite.ok and traj.workspace["files"] == row["files"]  # only the sandbox's copy changed
    assert not hidden.ok and "FileNotFoundError" in hidden.output  # the hidden tests never reach the sandbox
    assert not outside.ok and "outside the sandbox" in outside.output
    assert not forever.ok and "timed out" in forever.output
    assert traj.stop_reason == "finish" and traj.reward == 0.0  # the bug is still there
    import os

    assert not os.path.exists("/tmp/skyrl-agent-escape")
