"""Execution-match scoring for text-to-SQL: run the predicted and gold SQL on one database and compare results."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Union

from skyrl_gym.tools.sql import DEFAULT_MAX_VALUE_BYTES, SQLQueryError, run_read_only_query

DEFAULT_SCORE_TIMEOUT_S = 30.0
DEFAULT_SCORE_MAX_ROWS = 100_000
DEFAULT_SCORE_MAX_RESULT_BYTES = 64_000_000
"""Cap on the bytes of all fetched cells of one scored query (`run_read_only_query`'s `max_result_bytes`)."""


def rows_match(predicted: list[tuple[Any, ...]], gold: list[tuple[Any, ...]], order_matters: bool = False) -> bool:
    """Compare two result sets row by row: as multisets by default, as sequences when `order_matters`.

    Values compare with Python equality, so the integer 1 equals the real 1.0; column names are not compared, but
    column order is (each row is a tuple).
    """
    if order_matters:
        return predicted == gold
    return Counter(predicted) == Counter(gold)


def score_solution(
    db_file: Union[str, Path],
    predicted_sql: str,
    gold_sql: str,
    order_matters: bool = False,
    timeout_s: float = DEFAULT_SCORE_TIMEOUT_S,
    max_rows: int = DEFAULT_SCORE_MAX_ROWS,
    max_result_bytes: int = DEFAULT_SCORE_MAX_RESULT_BYTES,
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
) -> tuple[float, dict[str, Any]]:
    """Return (1.0 or 0.0, details) for a predicted query against the gold query on the same database.

    A predicted query that fails, times out, returns more than `max_rows` rows or passes a size cap
    (`max_result_bytes`, `max_value_bytes`: see `run_read_only_query`) scores 0.0 (the reason is in the details under
    `solution_error`). A gold query that fails is a data error: ValueError naming `reward_spec.ground_truth`.
    """
    caps = {"max_result_bytes": max_result_bytes, "max_value_bytes": max_value_bytes}
    try:
        gold = run_read_only_query(db_file, gold_sql, timeout_s, max_rows, **caps)
    except SQLQueryError as exc:
        raise ValueError(
            f"reward_spec.ground_truth: the gold SQL {gold_sql!r} fails on {db_file}: {exc} (the scorer's caps are "
            "score_timeout_s, score_max_result_bytes and max_value_bytes)"
        ) from exc
    if gold.truncated:
        raise ValueError(
            f"reward_spec.ground_truth: the gold SQL returns more than {max_rows} rows on {db_file}; raise "
            "score_max_rows to compare such results"
        )
    try:
        predicted = run_read_only_query(db_file, predicted_sql, timeout_s, max_rows, **caps)
    except SQLQueryError as exc:
        return 0.0, {"solution_error": str(exc)}
    if predicted.truncated:
        return 0.0, {"solution_error": f"the solution returns more than {max_rows} rows"}
    matched = rows_match(predicted.rows, gold.rows, order_matters)
    return (1.0 if matched else 0.0), {"predicted_rows": len(predicted.rows), "gold_rows": len(gold.rows)}
