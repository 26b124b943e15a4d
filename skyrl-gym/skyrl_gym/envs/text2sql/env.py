"""`Text2SQLEnv`: a multi-turn env where the model explores a SQLite database with `<sql>` and answers in `<solution>`.

Each turn the model either runs a query, `<sql>SELECT ...</sql>`, and sees the result table (or the error) in an
`<observation>` user message with the number of turns left, or ends the episode with `<solution>SELECT ...</solution>`.
The solution scores 1.0 when it returns the same rows as the gold SQL (`reward_spec.ground_truth`) on the same
database, else 0.0.

env_config keys: `db_path` (required: a directory holding `<db_id>.sqlite` or `<db_id>/<db_id>.sqlite`),
`order_matters` (False), `format_penalty` (0.0; a reward <= 0 for a final turn without a solution),
`query_timeout_s` (5), `max_rows` (50), `max_cell_chars` (200), `max_result_bytes` (4000000: one tool query's fetched
cells), `max_value_bytes` (1000000: one string or blob, tool and scorer), `max_sql_bytes` (100000: one query's text),
`score_timeout_s` (30), `score_max_rows` (100000), `score_max_result_bytes` (64000000), `max_turns` (5). The row's
extras give `db_id` (or `extra_info.db_id`).
"""

from __future__ import annotations

import re
from typing import Any, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, final_step, reply_step
from skyrl_gym.envs.text2sql.scoring import (
    DEFAULT_SCORE_MAX_RESULT_BYTES,
    DEFAULT_SCORE_MAX_ROWS,
    DEFAULT_SCORE_TIMEOUT_S,
    score_solution,
)
from skyrl_gym.tools.parsing import extract_tag
from skyrl_gym.tools.sql import (
    DEFAULT_MAX_CELL_CHARS,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_MAX_ROWS,
    DEFAULT_MAX_SQL_BYTES,
    DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_TIMEOUT_S,
    SQLToolGroup,
    resolve_db_file,
)

NO_ACTION_HINT = (
    "No <sql>...</sql> query or <solution>...</solution> found. Run a query with <sql>SELECT ...</sql> or give "
    "your final answer with <solution>SELECT ...</solution>."
)

_CODE_FENCE = re.compile(r"^```(?:[\w+-]*[ \t]*\n)?(.*?)```$", re.DOTALL)


def strip_code_fence(sql: Optional[str]) -> Optional[str]:
    """Drop a Markdown code fence (```sql ... ```) around a tag's SQL; None stays None."""
    if sql is None:
        return None
    match = _CODE_FENCE.match(sql.strip())
    return match.group(1).strip() if match else sql


def _positive(config: dict[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"Text2SQLEnv: env_config['{key}'] must be a positive number, got {value!r}")
    return value


class Text2SQLEnv(BaseTextEnv):
    """Text-to-SQL with a read-only SQLite tool; reward 1.0 when the solution's result set matches the gold SQL's."""

    config_keys = (
        "db_path",
        "order_matters",
        "format_penalty",
        "score_timeout_s",
        "score_max_rows",
        "query_timeout_s",
        "max_rows",
        "max_cell_chars",
        "max_result_bytes",
        "max_value_bytes",
        "max_sql_bytes",
        "score_max_result_bytes",
    )

    default_max_turns = 5
    episode_tallies = {"sql_calls": 0, "sql_errors": 0, "gave_solution": False, "solved": False}

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        config = self.env_config
        gold_sql = self.ground_truth()
        if not isinstance(gold_sql, str) or not gold_sql.strip():
            raise ValueError(
                f"Text2SQLEnv: reward_spec.ground_truth must be the gold SQL as a non-empty string, got {gold_sql!r}"
            )
        self.gold_sql: str = gold_sql
        db_dir = config.get("db_path")
        if not db_dir:
            raise ValueError("Text2SQLEnv: env_config['db_path'] is required (a directory of <db_id>.sqlite files)")
        extra_info = self.extras.get("extra_info") or {}
        db_id = self.extras.get("db_id", extra_info.get("db_id") if isinstance(extra_info, dict) else None)
        if db_id is None:
            raise ValueError("Text2SQLEnv: the dataset row needs a 'db_id' column (or extra_info.db_id)")
        self.db_id: str = db_id
        self.db_file = resolve_db_file(db_dir, db_id)
        self.order_matters = config.get("order_matters", False)
        if not isinstance(self.order_matters, bool):
            raise ValueError(
                f"Text2SQLEnv: env_config['order_matters'] must be true or false, got {self.order_matters!r}"
            )
        penalty = config.get("format_penalty", 0.0)
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or penalty > 0:
            raise ValueError(f"Text2SQLEnv: env_config['format_penalty'] must be a number <= 0, got {penalty!r}")
        self.format_penalty = float(penalty)
        self.score_limits: dict[str, Any] = {
            "timeout_s": _positive(config, "score_timeout_s", DEFAULT_SCORE_TIMEOUT_S),
            "max_rows": int(_positive(config, "score_max_rows", DEFAULT_SCORE_MAX_ROWS)),
            "max_result_bytes": int(_positive(config, "score_max_result_bytes", DEFAULT_SCORE_MAX_RESULT_BYTES)),
            "max_value_bytes": int(_positive(config, "max_value_bytes", DEFAULT_MAX_VALUE_BYTES)),
        }
        """`score_solution`'s caps from env_config (`max_value_bytes` also caps the SQL tool's values)."""
        self.toolbox.add_group(
            SQLToolGroup(
                self.db_file,
                timeout_s=_positive(config, "query_timeout_s", DEFAULT_TIMEOUT_S),
                max_rows=int(_positive(config, "max_rows", DEFAULT_MAX_ROWS)),
                max_cell_chars=int(_positive(config, "max_cell_chars", DEFAULT_MAX_CELL_CHARS)),
                max_value_bytes=self.score_limits["max_value_bytes"],
                max_result_bytes=int(_positive(config, "max_result_bytes", DEFAULT_MAX_RESULT_BYTES)),
                max_sql_bytes=int(_positive(config, "max_sql_bytes", DEFAULT_MAX_SQL_BYTES)),
            )
        )

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Start an episode; the prompt (question and schema from the dataset) is passed through unchanged."""
        self._begin_episode()
        return prompt, {"db_id": self.db_id}

    def _turns_left_note(self) -> str:
        left = self.max_turns - self.turns
        if left == 1:
            return "You have 1 turn left: it must give your final answer as <solution>SELECT ...</solution>."
        return f"You have {left} turns left."

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        solution = strip_code_fence(extract_tag(action, "solution"))
        if solution is not None:
            self.gave_solution = True
            reward, details = score_solution(
                self.db_file, solution, self.gold_sql, self.order_matters, **self.score_limits
            )
            self.solved = reward == 1.0
            metadata = {"solution": solution, "correct": self.solved, **details}
            return final_step(reward, metadata)
        if self.is_last_turn:
            return final_step(self.format_penalty, {"truncated": True, "no_solution": True})
        result, metadata = self.query_tool("sql", strip_code_fence(extract_tag(action, "sql")))
        if result is not None:
            self.sql_calls += 1
            if not result.ok:
                self.sql_errors += 1
        body = NO_ACTION_HINT if result is None else result.text
        return reply_step(f"<observation>\n{body}\n{self._turns_left_note()}\n</observation>", metadata)
