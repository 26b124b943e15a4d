"""`search`: questions about a generated world of facts, answered with the `search` tool against skyrl-gym's BM25
retrieval server.

`write_corpus(path, seed)` writes the corpus (one fact per passage, e.g. "The capital of Vorland is Tesk."); start
the server on it (`python -m skyrl_gym.tools.retrieval_server --corpus corpus.jsonl --port 8000`) and give the task
its URL (`task_args: {search_url: http://127.0.0.1:8000}`). The agent searches, reads the passages, and answers
`<answer>Tesk</answer>`; reward 1.0 for the right name (case and surrounding spaces ignored).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Union

from skyrl_agent.registry import register_task
from skyrl_agent.tasks.base import Task
from skyrl_agent.trajectory import AgentTrajectory
from skyrl_gym.tools import ToolGroup
from skyrl_gym.tools.search import SearchToolGroup

_SYLLABLES = ["vor", "tes", "kal", "mun", "dri", "zan", "pol", "quen", "ras", "lio", "bek", "sor", "tha", "ume"]
RELATIONS = [("capital", "The capital of {x} is {y}."), ("river", "The longest river of {x} is the {y}.")]


def _name(rng: random.Random) -> str:
    return "".join(rng.sample(_SYLLABLES, 2)).capitalize()


def world(seed: int, countries: int = 40) -> list[dict[str, str]]:
    """The facts: for each invented country, its capital and its longest river."""
    rng = random.Random(f"search/world/{seed}")
    names: set[str] = set()
    facts = []
    while len(names) < countries:
        names.add(_name(rng) + "land")
    for country in sorted(names):
        for relation, template in RELATIONS:
            value = _name(rng)
            facts.append(
                {"country": country, "relation": relation, "value": value, "text": template.format(x=country, y=value)}
            )
    return facts


def write_corpus(path: Union[str, Path], seed: int = 0) -> Path:
    """The retrieval server's corpus: one passage per fact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for index, fact in enumerate(world(seed)):
            out.write(json.dumps({"id": str(index), "title": fact["country"], "text": fact["text"]}) + "\n")
    return path


@register_task("search", builtin=True)
class SearchTask(Task):
    """Questions about the world of `corpus_seed`, answered through the server at `search_url`."""

    system_prompt = "Use the search tool to find facts. Answer with the name only, as <answer>Name</answer>."

    def __init__(self, search_url: str = "http://127.0.0.1:8000", corpus_seed: int = 0, topk: int = 3) -> None:
        self.search_url, self.corpus_seed, self.topk = search_url, corpus_seed, topk

    def build_dataset(self, size: int, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
        """`size` questions about the world's facts."""
        rng = random.Random(f"search/{split}/{seed}")
        facts = world(self.corpus_seed)
        rows = []
        for index in range(size):
            fact = rng.choice(facts)
            question = (
                f"What is the {'capital' if fact['relation'] == 'capital' else 'longest river'} of {fact['country']}?"
            )
            rows.append({"id": f"{split}-{seed}-{index}", "prompt": question, "answer": fact["value"]})
        return rows

    def tool_groups(self, instance: dict[str, Any]) -> list[ToolGroup]:
        """The `search` tool on the configured server."""
        return [SearchToolGroup(self.search_url, topk=self.topk)]

    def evaluate(self, instance: dict[str, Any], trajectory: AgentTrajectory) -> float:
        """1.0 for the right name."""
        answer = (trajectory.final_answer or "").strip().lower().removeprefix("the ")
        return 1.0 if answer == instance["answer"].lower() else 0.0
