"""SQLite tool group: run model-written SQL read-only, under a time limit, a row cap and a cell text cap.

Three layers keep the database file unchanged: the connection is opened with a `file:...?mode=ro` URI, it sets
`PRAGMA query_only=ON`, and an authorizer refuses every action but reading (SELECT, WITH [RECURSIVE], functions and
schema-introspection PRAGMAs), so an INSERT, DROP or ATTACH fails with a message that says why.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from skyrl_gym.tools.core import ToolGroup, ToolResult, tool

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_ROWS = 50
DEFAULT_MAX_CELL_CHARS = 200
_PROGRESS_EVERY_N_OPS = 1000

_READ_ONLY_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo", "foreign_key_list"}
)
_ACTION_NAMES: dict[int, str] = {
    getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ")
    for name in [
        "CREATE_INDEX",
        "CREATE_TABLE",
        "CREATE_TEMP_INDEX",
        "CREATE_TEMP_TABLE",
        "CREATE_TEMP_TRIGGER",
        "CREATE_TEMP_VIEW",
        "CREATE_TRIGGER",
        "CREATE_VIEW",
        "DELETE",
        "DROP_INDEX",
        "DROP_TABLE",
        "DROP_TEMP_INDEX",
        "DROP_TEMP_TABLE",
        "DROP_TEMP_TRIGGER",
        "DROP_TEMP_VIEW",
        "DROP_TRIGGER",
        "DROP_VIEW",
        "INSERT",
        "PRAGMA",
        "READ",
        "SELECT",
        "TRANSACTION",
        "UPDATE",
        "ATTACH",
        "DETACH",
        "ALTER_TABLE",
        "REINDEX",
        "ANALYZE",
        "CREATE_VTABLE",
        "DROP_VTABLE",
        "FUNCTION",
        "SAVEPOINT",
        "RECURSIVE",
    ]
    if hasattr(sqlite3, f"SQLITE_{name}")
}
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_temp_master", "sqlite_schema", "sqlite_temp_schema"})
_ALWAYS_ALLOWED = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)


class SQLQueryError(Exception):
    """A query failed (syntax, unknown table, refused write, timeout); the message is meant for the model."""


@dataclass(frozen=True)
class QueryResult:
    """The rows a query returned: column names, row tuples, and whether the row cap cut the result short."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool


def resolve_db_file(db_dir: Union[str, Path], db_id: str) -> Path:
    """Find `<db_dir>/<db_id>.sqlite` or `<db_dir>/<db_id>/<db_id>.sqlite`; raise ValueError naming both paths."""
    if not isinstance(db_id, str) or not db_id.strip():
        raise ValueError(f"db_id must be a non-empty string, got {db_id!r}")
    if "/" in db_id or "\\" in db_id or db_id in (".", ".."):
        raise ValueError(f"db_id {db_id!r} must be a plain name, not a path")
    base = Path(db_dir)
    candidates = [base / f"{db_id}.sqlite", base / db_id / f"{db_id}.sqlite"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ValueError(f"database '{db_id}' not found: neither {candidates[0]} nor {candidates[1]} exists")


def _connect_read_only(db_file: Path) -> sqlite3.Connection:
    """Open `db_file` read-only (URI mode=ro, query_only, a read-only authorizer, no ATTACH)."""
    conn = sqlite3.connect(f"{db_file.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    conn.execute("PRAGMA query_only=ON")
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    return conn


def _install_authorizer(conn: sqlite3.Connection, refused: list[str]) -> None:
    """Allow only reads; remember the first refused action in `refused` for a clear error message."""

    def authorize(action: int, arg1: Optional[str], arg2: Optional[str], _db: Optional[str], _src: Optional[str]):
        if action in _ALWAYS_ALLOWED:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and arg1 is not None and arg1.lower() in _READ_ONLY_PRAGMAS:
            return sqlite3.SQLITE_OK
        name = _ACTION_NAMES.get(action, f"action {action}")
        if action == sqlite3.SQLITE_PRAGMA:
            name = f"PRAGMA {arg1}"
        elif arg1 in _SCHEMA_TABLES:  # CREATE/DROP first ask to write the schema table
            name = "changing the schema (CREATE / DROP)"
        refused.append(name)
        return sqlite3.SQLITE_DENY

    conn.set_authorizer(authorize)


def run_read_only_query(
    db_file: Union[str, Path], query: str, timeout_s: float = DEFAULT_TIMEOUT_S, max_rows: int = DEFAULT_MAX_ROWS
) -> QueryResult:
    """Run one SQL statement read-only and return at most `max_rows` rows; raise `SQLQueryError` on any failure.

    The time limit covers preparing, running and fetching; a progress handler interrupts the query once it is
    exceeded. `truncated` is True when the query had more than `max_rows` rows.
    """
    if not query or not query.strip():
        raise SQLQueryError("the SQL query is empty")
    try:
        conn = _connect_read_only(Path(db_file))
    except sqlite3.Error as exc:
        raise SQLQueryError(f"cannot open database {db_file}: {exc}") from exc
    refused: list[str] = []
    deadline = time.monotonic() + timeout_s
    timed_out = [False]

    def past_deadline() -> int:
        if time.monotonic() > deadline:
            timed_out[0] = True
            return 1
        return 0

    try:
        _install_authorizer(conn, refused)
        conn.set_progress_handler(past_deadline, _PROGRESS_EVERY_N_OPS)
        cursor = conn.execute(query)
        columns = [column[0] for column in cursor.description or []]
        rows = cursor.fetchmany(max_rows + 1)
    except (sqlite3.Error, sqlite3.Warning) as exc:
        if timed_out[0]:
            raise SQLQueryError(f"query timed out after {timeout_s:g} s and was interrupted") from exc
        if refused:
            raise SQLQueryError(
                f"not allowed: {refused[0]} (the database is read-only; only SELECT / WITH queries and schema "
                "PRAGMAs such as table_info may run)"
            ) from exc
        raise SQLQueryError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()
    return QueryResult(columns, [tuple(row) for row in rows[:max_rows]], truncated=len(rows) > max_rows)


def _cell_text(value: Any, max_chars: int) -> str:
    """One cell as table text: NULL for None, a size note for blobs, long text cut to `max_chars`."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<blob {len(value)} bytes>"
    text = str(value).replace("\n", " ").replace("|", "\\|")
    if len(text) > max_chars:
        return f"{text[:max_chars]}... ({len(text)} chars)"
    return text


def format_result_table(result: QueryResult, max_cell_chars: int = DEFAULT_MAX_CELL_CHARS) -> str:
    """Render a result as a Markdown-style table followed by a row count (and a note when it was truncated)."""
    if not result.columns:
        return "The statement ran and returned no columns."
    lines = [
        "| " + " | ".join(result.columns) + " |",
        "| " + " | ".join("---" for _ in result.columns) + " |",
    ]
    lines.extend("| " + " | ".join(_cell_text(v, max_cell_chars) for v in row) + " |" for row in result.rows)
    count = len(result.rows)
    if result.truncated:
        lines.append(f"(showing the first {count} rows; the result has more rows)")
    else:
        lines.append(f"({count} row{'s' if count != 1 else ''})")
    return "\n".join(lines)


class SQLToolGroup(ToolGroup):
    """The `sql` tool over one SQLite database file, opened read-only for every query."""

    def __init__(
        self,
        db_file: Union[str, Path],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_cell_chars: int = DEFAULT_MAX_CELL_CHARS,
        name: str = "sqlite",
    ) -> None:
        for label, value in (("timeout_s", timeout_s), ("max_rows", max_rows), ("max_cell_chars", max_cell_chars)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SQLToolGroup: {label} must be a positive number, got {value!r}")
        self.db_file = Path(db_file)
        if not self.db_file.is_file():
            raise ValueError(f"SQLToolGroup: database file {self.db_file} does not exist")
        self.timeout_s = float(timeout_s)
        self.max_rows = int(max_rows)
        self.max_cell_chars = int(max_cell_chars)
        super().__init__(name)

    @tool
    def sql(self, query: str) -> ToolResult:
        """Run one read-only SQL query (SELECT or WITH) on the database and return the result table.

        Args:
            query: A single SQLite statement, e.g. "SELECT name FROM sqlite_master WHERE type = 'table'".
        """
        try:
            result = run_read_only_query(self.db_file, query, self.timeout_s, self.max_rows)
        except SQLQueryError as exc:
            return ToolResult("sql", False, error=str(exc))
        return ToolResult("sql", True, output=format_result_table(result, self.max_cell_chars), data=result)
