"""SQLite tool group: run model-written SQL read-only, under a time limit and hard size caps.

Three layers keep the database file unchanged: the connection is opened with a `file:...?mode=ro` URI, it sets
`PRAGMA query_only=ON`, and an authorizer refuses every action but reading (SELECT, WITH [RECURSIVE], functions and
schema-introspection PRAGMAs), so an INSERT, DROP or ATTACH fails with a message that says why.

The SQL is model output, so nothing it asks for may exhaust the process's memory or time (`run_read_only_query`):
the query text is capped (`max_sql_bytes`, also SQLite's `SQLITE_LIMIT_SQL_LENGTH`), every value SQLite makes is
capped (`max_value_bytes`, SQLite's `SQLITE_LIMIT_LENGTH`, lowered further for wide results so that one row always
fits the result cap), the rows are counted as they are fetched (`max_rows`) and so are their bytes
(`max_result_bytes`), and a watchdog thread interrupts the query at its deadline (`timeout_s`), however few
operations it is made of.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from skyrl_gym.tools.core import ToolGroup, ToolResult, tool

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_ROWS = 50
DEFAULT_MAX_CELL_CHARS = 200
DEFAULT_MAX_VALUE_BYTES = 1_000_000
"""Cap on one string or blob a query makes or reads (`SQLITE_LIMIT_LENGTH`)."""
DEFAULT_MAX_RESULT_BYTES = 4_000_000
"""Cap on the bytes of all fetched cells of one tool query (text and blobs by length, numbers as 8)."""
DEFAULT_MAX_SQL_BYTES = 100_000
"""Cap on the query text in UTF-8 bytes (`SQLITE_LIMIT_SQL_LENGTH`)."""
_MAX_LIKE_PATTERN_BYTES = 1000
"""`SQLITE_LIMIT_LIKE_PATTERN_LENGTH`: one LIKE/GLOB runs in time ~ pattern x subject and cannot be interrupted."""
_PRINTF_SPEC = re.compile(r"%[-+ 0#,!]*(\*|\d+)?(?:\.(\*|\d+))?(?:ll|l)?([a-zA-Z%])")

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
    conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, _MAX_LIKE_PATTERN_BYTES)
    return conn


def _number(value: Any) -> float:
    """A printf argument as SQLite reads it for a width or precision: numbers as they are, text by its numeric
    prefix (0 when it has none)."""
    if isinstance(value, (int, float)):
        return value
    match = re.match(r"\s*[-+]?\d+", value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))
    return int(match.group()) if match else 0


def _install_printf_guard(conn: sqlite3.Connection, value_cap: int) -> None:
    """Replace `printf`/`format` on `conn` by a front that answers NULL at once for a `%c` whose precision (its
    repeat count) passes `value_cap`, and hands every other call to SQLite's own printf on a private connection.

    SQLite answers NULL for such a call too (the text would pass `SQLITE_LIMIT_LENGTH`), but only after looping
    through the whole count in one uninterruptible step: `printf('%.*c', 2147483647, 'x')` took 17 s.
    """
    helper: list[sqlite3.Connection] = []

    def printf(template: Any, *args: Any) -> Any:
        if isinstance(template, str):
            used = 0
            for width, precision, kind in _PRINTF_SPEC.findall(template):
                sizes = []
                for part in (width, precision):
                    if part == "*":
                        sizes.append(_number(args[used]) if used < len(args) else 0)
                        used += 1
                    else:
                        sizes.append(int(part) if part else 0)
                if kind == "c" and sizes[1] > value_cap:
                    return None
                used += kind not in "%n"
        if not helper:
            helper.append(sqlite3.connect(":memory:"))
            helper[0].setlimit(sqlite3.SQLITE_LIMIT_LENGTH, value_cap)
        marks = ", ".join("?" * (1 + len(args)))
        return helper[0].execute(f"SELECT printf({marks})", (template, *args)).fetchone()[0]

    for name in ("printf", "format"):
        conn.create_function(name, -1, printf, deterministic=True)


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


def _result_width(conn: sqlite3.Connection, query: str) -> int:
    """The number of columns `query` returns, read from its compiled program (`EXPLAIN`: the `ResultRow` opcode's
    P2) without running it; SQLite's column limit when that fails (e.g. the query is itself an EXPLAIN)."""
    try:
        program = conn.execute(f"EXPLAIN {query}").fetchall()
    except (sqlite3.Error, sqlite3.Warning):
        return conn.getlimit(sqlite3.SQLITE_LIMIT_COLUMN)
    return max((row[3] for row in program if row[1] == "ResultRow"), default=1)


def _row_bytes(row: tuple[Any, ...]) -> int:
    """A fetched row's size as the result cap counts it: text and blobs by length, anything else as 8 bytes."""
    return sum(len(value) if type(value) in (str, bytes) else 8 for value in row)


class _Watchdog:
    """Interrupts a connection's statements once its deadline passes (`sqlite3.Connection.interrupt`), from a thread
    of its own: a query made of a few long operations never reaches a progress handler's next call. After the
    deadline it interrupts again every 10 ms until stopped, since an interrupt that lands between two statements
    (the width probe and the query) is a no-op in SQLite."""

    def __init__(self, conn: sqlite3.Connection, timeout_s: float) -> None:
        self.fired = False
        self._conn: Optional[sqlite3.Connection] = conn
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        threading.Thread(target=self._run, args=(timeout_s,), name="sql-watchdog", daemon=True).start()

    def _run(self, timeout_s: float) -> None:
        if self._stopped.wait(timeout_s):
            return
        while True:
            with self._lock:
                if self._conn is None:
                    return
                self.fired = True
                self._conn.interrupt()
            if self._stopped.wait(0.01):
                return

    def stop(self) -> None:
        """Disarm (before the connection closes: an interrupt must never reach a closed connection)."""
        self._stopped.set()
        with self._lock:
            self._conn = None


def run_read_only_query(
    db_file: Union[str, Path],
    query: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_rows: int = DEFAULT_MAX_ROWS,
    *,
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    max_sql_bytes: int = DEFAULT_MAX_SQL_BYTES,
) -> QueryResult:
    """Run one SQL statement read-only and return at most `max_rows` rows; raise `SQLQueryError` on any failure.

    The time limit covers preparing, running and fetching: a watchdog thread interrupts the query once it is
    exceeded. `truncated` is True when the query had more than `max_rows` rows. A query longer than
    `max_sql_bytes`, a value longer than `max_value_bytes` (less when the result is so wide that one row could pass
    the result cap: then each of its N columns gets `max_result_bytes / N`) and a result whose fetched cells pass
    `max_result_bytes` fail with an error naming the cap.
    """
    if not query or not query.strip():
        raise SQLQueryError("the SQL query is empty")
    sql_bytes = len(query.encode("utf-8", "surrogatepass"))
    if sql_bytes > max_sql_bytes:
        raise SQLQueryError(f"the SQL query is {sql_bytes} bytes, over the {max_sql_bytes}-byte cap (max_sql_bytes)")
    try:
        conn = _connect_read_only(Path(db_file))
    except sqlite3.Error as exc:
        raise SQLQueryError(f"cannot open database {db_file}: {exc}") from exc
    refused: list[str] = []
    watchdog = _Watchdog(conn, timeout_s)
    value_cap = max_value_bytes
    width = 0
    rows: list[tuple[Any, ...]] = []
    total = 0
    try:
        _install_authorizer(conn, refused)
        width = _result_width(conn, query)  # also reads the schema, under SQLite's own limits: the caps below
        value_cap = max(1, min(max_value_bytes, max_result_bytes // max(width, 1)))  # would refuse long CREATEs
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, max_sql_bytes)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, value_cap)
        _install_printf_guard(conn, value_cap)
        cursor = conn.execute(query)
        columns = [column[0] for column in cursor.description or []]
        for row in cursor:
            total += _row_bytes(row)
            if total > max_result_bytes:
                raise SQLQueryError(
                    f"the result passed the {max_result_bytes}-byte cap on a query's result (max_result_bytes) at "
                    f"row {len(rows) + 1}; select fewer rows or columns, or measure large values with length()"
                )
            rows.append(row)
            if len(rows) > max_rows:
                break
    except (sqlite3.Error, sqlite3.Warning) as exc:
        if watchdog.fired:
            raise SQLQueryError(f"query timed out after {timeout_s:g} s and was interrupted") from exc
        if refused:
            raise SQLQueryError(
                f"not allowed: {refused[0]} (the database is read-only; only SELECT / WITH queries and schema "
                "PRAGMAs such as table_info may run)"
            ) from exc
        if "pattern too complex" in str(exc):  # SQLITE_ERROR: only the message tells
            raise SQLQueryError(
                f"a LIKE or GLOB pattern is longer than {_MAX_LIKE_PATTERN_BYTES} bytes, the cap on one pattern"
            ) from exc
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_TOOBIG:  # its message may not fit a tiny cap
            shared = (
                ""
                if value_cap == max_value_bytes
                else f", lowered so that one row of this query's {width} columns fits max_result_bytes "
                f"({max_result_bytes})"
            )
            raise SQLQueryError(
                f"a value would be longer than {value_cap} bytes, the cap on one value (max_value_bytes="
                f"{max_value_bytes}{shared}); use length() or substr() on large values"
            ) from exc
        raise SQLQueryError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        watchdog.stop()
        conn.close()
    return QueryResult(columns, rows[:max_rows], truncated=len(rows) > max_rows)


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
    """The `sql` tool over one SQLite database file, opened read-only for every query (caps: `run_read_only_query`)."""

    def __init__(
        self,
        db_file: Union[str, Path],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_cell_chars: int = DEFAULT_MAX_CELL_CHARS,
        name: str = "sqlite",
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        max_sql_bytes: int = DEFAULT_MAX_SQL_BYTES,
    ) -> None:
        settings = {
            "timeout_s": timeout_s,
            "max_rows": max_rows,
            "max_cell_chars": max_cell_chars,
            "max_value_bytes": max_value_bytes,
            "max_result_bytes": max_result_bytes,
            "max_sql_bytes": max_sql_bytes,
        }
        for label, value in settings.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SQLToolGroup: {label} must be a positive number, got {value!r}")
        self.db_file = Path(db_file)
        if not self.db_file.is_file():
            raise ValueError(f"SQLToolGroup: database file {self.db_file} does not exist")
        self.timeout_s = float(timeout_s)
        self.max_rows = int(max_rows)
        self.max_cell_chars = int(max_cell_chars)
        self.max_value_bytes = int(max_value_bytes)
        self.max_result_bytes = int(max_result_bytes)
        self.max_sql_bytes = int(max_sql_bytes)
        super().__init__(name)

    @tool
    def sql(self, query: str) -> ToolResult:
        """Run one read-only SQL query (SELECT or WITH) on the database and return the result table.

        Args:
            query: A single SQLite statement, e.g. "SELECT name FROM sqlite_master WHERE type = 'table'".
        """
        try:
            result = run_read_only_query(
                self.db_file,
                query,
                self.timeout_s,
                self.max_rows,
                max_value_bytes=self.max_value_bytes,
                max_result_bytes=self.max_result_bytes,
                max_sql_bytes=self.max_sql_bytes,
            )
        except SQLQueryError as exc:
            return ToolResult("sql", False, error=str(exc))
        return ToolResult("sql", True, output=format_result_table(result, self.max_cell_chars), data=result)
