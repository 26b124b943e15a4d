"""`SearchEnv`: a multi-turn env where the model queries a retrieval server with `<search>` and replies in `<answer>`.

Each turn the model either searches, `<search>query</search>`, and sees the passages as an
`<information>Doc 1 (Title: ...): ...</information>` user message, or ends the episode with `<answer>...</answer>`,
scored 1.0 when it equals a target after normalisation (lowercase, no punctuation, no articles, single spaces).

env_config keys: `search_url` ("http://127.0.0.1:8000"; the client POSTs to `{search_url}/retrieve`), `topk` (3),
`timeout` (30 s per request), `max_attempts` (4), `backoff_base` (0.5 s, doubled after every failed attempt),
`backoff_max` (8 s), `log_requests` (false; true logs each query and its outcome), `max_turns` (4); any other key is
refused. Ground truth: a string, a list of strings, or {"target": [strings]}.
"""

from __future__ import annotations

from typing import Any, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, final_step, reply_step
from skyrl_gym.rewards.exact_match import exact_match, parse_targets
from skyrl_gym.tools.parsing import extract_tag
from skyrl_gym.tools.search import SearchToolGroup

NO_ACTION_HINT = (
    "No <search>...</search> query or <answer>...</answer> found. Search with <search>your query</search> or "
    "give your final answer with <answer>...</answer>."
)


class SearchEnv(BaseTextEnv):
    """Question answering with a search tool; reward 1.0 for a normalised exact match of the answer, else 0.0."""

    config_keys = ("search_url", "topk", "timeout", "max_attempts", "backoff_base", "backoff_max", "log_requests")

    default_max_turns = 4
    episode_tallies = {"searches": 0, "search_errors": 0, "answered": False, "correct": False}

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        self.targets: list[str] = parse_targets(self.ground_truth())
        self.toolbox.add_group(SearchToolGroup.from_env_config(self.env_config))

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        answer = extract_tag(action, "answer")
        if answer is not None:
            self.answered = True
            reward = exact_match(answer, self.targets)
            self.correct = reward == 1.0
            metadata = {"answer": answer, "correct": self.correct}
            return final_step(reward, metadata)
        if self.is_last_turn:
            return final_step(0.0, {"truncated": True, "no_answer": True})
        query = extract_tag(action, "search")
        result, metadata = self.query_tool("search", query)
        if result is None:
            return reply_step(NO_ACTION_HINT, metadata)
        self.searches += 1
        if not result.ok:
            self.search_errors += 1
        metadata["search_query"] = query
        return reply_step(f"<information>{result.text}</information>", metadata)
