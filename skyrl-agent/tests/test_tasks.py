"""The built-in tasks with their real tools: math with the sandboxed python tool, Text2SQL on generated SQLite
databases, search against the BM25 retrieval server on 127.0.0.1. The model is `ScriptedBackend` (the test writes
its turns); tools, servers, databases and evaluators are real."""

import json
import re

import pytest

from skyrl_agent import AgentRunner
from skyrl_agent.tasks import MathPythonTask, OpenEnvTask, SearchTask, Text2SQLTask
from skyrl_agent.tasks.search import write_corpus
from skyrl_agent.testing import ScriptedBackend
from skyrl_gym.tools.retrieval_server import RetrievalServer

pytestmark = pytest.mark.slow


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def run(tokenizer, task: str, task_args: dict, rows: list, script) -> list:
    cfg = {
        "task": task,
        "task_args": task_args,
        "generator": {"max_iterations": 4, "max_prompt_length": 8192, "sampling_params": {"max_tokens": 300}},
        "dispatcher": {"progress": False},
    }
    return AgentRunner(cfg, ScriptedBackend(tokenizer, script), tokenizer).run(rows).trajectories


def turn(request) -> int:
    return sum(m["role"] == "assistant" for m in request.messages)


def test_math_questions_are_answered_with_the_python_tool(tokenizer):
    rows = MathPythonTask().build_dataset(4, seed=1)
    program = {
        "What is the sum of i\\*\\*(\\d+) for i from 1 to (\\d+)\\?": "print(sum(i**{0} for i in range(1, {1} + 1)))",
        "How many primes are there below (\\d+)\\?": "print(sum(all(n % d for d in range(2, int(n**0.5) + 1)) for n in range(2, {0})))",
        "What is (\\d+)\\*\\*(\\d+) mod (\\d+)\\?": "print(pow({0}, {1}, {2}))",
        "What is the sum of the digits of (\\d+)!\\?": "import math\nprint(sum(map(int, str(math.factorial({0})))))",
    }

    def script(request):
        if turn(request) == 0:
            question = request.messages[-1]["content"]
            for pattern, code in program.items():
                found = re.fullmatch(pattern, question)
                if found:
                    return call("python", code=code.format(*found.groups()))
            raise AssertionError(question)
        return f"<answer>{request.messages[-1]['content']}</answer>"

    trajectories = run(tokenizer, "math_python", {}, rows, script)
    assert [t.reward for t in trajectories] == [1.0] * 4, [t.summary() for t in trajectories]
    assert all(t.tool_calls[0].ok for t in trajectories)


def test_text2sql_rewards_an_executing_match_and_not_a_wrong_query(tokenizer, tmp_path):
    task = Text2SQLTask(db_dir=str(tmp_path / "dbs"))
    rows = task.build_dataset(4, seed=2)

    def script(request, wrong=False):
        if turn(request) == 0:
            return call("sql", query="SELECT name FROM sqlite_master WHERE type = 'table'")
        question = next(m["content"] for m in request.messages if m["role"] == "user")
        gold = next(r["gold_sql"] for r in rows if r["prompt"] == question)
        return f"<answer>{'SELECT 1' if wrong else gold}</answer>"

    right = run(tokenizer, "text2sql", {"db_dir": str(tmp_path / "dbs")}, rows, script)
    assert [t.reward for t in right] == [1.0] * 4 and "employees" in right[0].tool_calls[0].output
    wrong = run(tokenizer, "text2sql", {"db_dir": str(tmp_path / "dbs")}, rows, lambda r: script(r, wrong=True))
    assert [t.reward for t in wrong] == [0.0] * 4


def test_search_questions_are_answered_from_the_bm25_server(tokenizer, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", seed=0)
    with RetrievalServer(corpus) as server:
        args = {"search_url": server.url, "corpus_seed": 0}
        rows = SearchTask(**args).build_dataset(5, seed=3)

        def script(request):
            if turn(request) == 0:
                return call("search", query=request.messages[-1]["content"].rstrip("?"))
            found = re.search(r"(?:capital of \w+ is|river of \w+ is the) (\w+)\.", request.messages[-1]["content"])
            return f"<answer>{found.group(1) if found else '?'}</answer>"

        trajectories = run(tokenizer, "search", args, rows, script)
    assert sum(t.reward for t in trajectories) >= 4, [t.messages[-2]["content"][:200] for t in trajectories]


def test_an_openenv_environment_is_played_through_its_tools(tokenizer):
    pytest.importorskip("openenv.core", reason='needs openenv-core: pip install -e "./skyrl-gym[openenv]"')
    from skyrl_gym.envs.openenv.demo_server import DemoServer

    def script(request):
        """Binary search: reset with the prompt's seed, then guess the middle of what is left."""
        user = next(m["content"] for m in request.messages if m["role"] == "user")
        if turn(request) == 0:
            return call("reset", seed=int(re.search(r"Seed: (\d+)", user).group(1)))
        if "done: true" in request.messages[-1]["content"]:
            return "<answer>found it</answer>"
        low, high = 1, 20
        guesses = [
            json.loads(m["content"].split("<tool_call>")[1].split("</tool_call>")[0])["arguments"]["action"]["guess"]
            for m in request.messages
            if m["role"] == "assistant" and '"step"' in m["content"]
        ]
        hints = [m["content"] for m in request.messages if m["role"] == "tool"][1:]
        for guess, hint in zip(guesses, hints):
            low, high = (guess + 1, high) if "higher" in hint else (low, guess - 1)
        return call("step", action={"guess": (low + high) // 2})

    with DemoServer() as url:
        cfg_args = {"base_url": url, "prompt": "Guess the number from 1 to 20 with step({guess})."}
        rows = OpenEnvTask(**cfg_args).build_dataset(3, seed=0)
        cfg = {
            "task": "openenv",
            "task_args": cfg_args,
            "generator": {"max_iterations": 8, "max_prompt_length": 8192, "sampling_params": {"max_tokens": 300}},
            "dispatcher": {"progress": False},
        }
        trajectories = AgentRunner(cfg, ScriptedBackend(tokenizer, script), tokenizer).run(rows).trajectories
    assert [t.reward for t in trajectories] == [1.0] * 3, [t.summary() for t in trajectories]
    assert all(t.workspace["done"] and t.tool_calls[0].name == "reset" for t in trajectories)
    assert all(t.stop_reason == "answer" and all(c.ok for c in t.tool_calls) for t in trajectories)
