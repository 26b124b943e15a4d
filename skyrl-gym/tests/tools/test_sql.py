"""Tests of the SQLite tool group on real database files: tables, caps, read-only enforcement and timeouts."""

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from skyrl_gym.tools import Toolbox
from skyrl_gym.tools.sql import (
    QueryResult,
    SQLQueryError,
    SQLToolGroup,
    _connect_read_only,
    format_result_table,
    resolve_db_file,
    run_read_only_query,
)

SCHEMA = """
CREATE TABLE departments (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT, dept_id INTEGER REFERENCES departments(id), salary REAL);
CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, attachment BLOB);
INSERT INTO departments VALUES (1, 'Sales'), (2, 'Research');
INSERT INTO employees VALUES (1, 'Ann', 1, 5000.0), (2, 'Bob', 2, 6200.5), (3, 'Cid', 2, 4100.0),
                             (4, 'Dee', 1, 5000.0), (5, 'Eve', NULL, 3000.0);
INSERT INTO notes VALUES (1, 'short', NULL), (2, 'line one
line two | with pipe', x'00010203');
"""


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    path = tmp_path / "company.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.commit()
    conn.close()
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_select_renders_a_table_with_row_count(db_file):
    group = SQLToolGroup(db_file)
    result = group.call("sql", {"query": "SELECT name, salary FROM employees WHERE dept_id = 2 ORDER BY id"})
    assert result.ok
    assert result.output == "| name | salary |\n| --- | --- |\n| Bob | 6200.5 |\n| Cid | 4100.0 |\n(2 rows)"
    assert result.data == QueryResult(["name", "salary"], [("Bob", 6200.5), ("Cid", 4100.0)], truncated=False)


def test_null_blob_newline_and_pipe_cells(db_file):
    group = SQLToolGroup(db_file)
    result = group.call("sql", {"query": "SELECT body, attachment FROM notes ORDER BY id"})
    assert result.output.splitlines()[2:] == [
        "| short | NULL |",
        "| line one line two \\| with pipe | <blob 4 bytes> |",
        "(2 rows)",
    ]


def test_single_row_and_empty_result_counts(db_file):
    group = SQLToolGroup(db_file)
    assert group.call("sql", {"query": "SELECT 1 AS one"}).output.endswith("| 1 |\n(1 row)")
    empty = group.call("sql", {"query": "SELECT name FROM employees WHERE salary > 1e9"})
    assert empty.output == "| name |\n| --- |\n(0 rows)"


def test_row_cap_truncates_and_says_so(db_file):
    group = SQLToolGroup(db_file, max_rows=2)
    result = group.call("sql", {"query": "SELECT id FROM employees ORDER BY id"})
    assert result.ok and result.data.truncated
    assert result.data.rows == [(1,), (2,)]
    assert result.output.splitlines()[-1] == "(showing the first 2 rows; the result has more rows)"


def test_row_cap_equal_to_result_size_is_not_truncation(db_file):
    result = run_read_only_query(db_file, "SELECT id FROM departments", max_rows=2)
    assert result.rows == [(1,), (2,)] and not result.truncated


def test_cell_text_cap(db_file):
    group = SQLToolGroup(db_file, max_cell_chars=5)
    result = group.call("sql", {"query": "SELECT 'abcdefghij' AS s, 'abcde' AS t"})
    assert result.output.splitlines()[2] == "| abcde... (10 chars) | abcde |"


@pytest.mark.parametrize(
    "statement, refused",
    [
        ("INSERT INTO departments VALUES (3, 'Legal')", "INSERT"),
        ("UPDATE employees SET salary = 0", "UPDATE"),
        ("DELETE FROM employees", "DELETE"),
        ("DROP TABLE employees", "changing the schema"),
        ("CREATE TABLE t (x)", "changing the schema"),
        ("CREATE TEMP TABLE t (x)", "changing the schema"),
        ("ALTER TABLE employees ADD COLUMN age INTEGER", "ALTER TABLE"),
        ("ATTACH DATABASE ':memory:' AS other", "ATTACH"),
        ("PRAGMA query_only = OFF", "PRAGMA query_only"),
        ("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode"),
        ("BEGIN IMMEDIATE", "TRANSACTION"),
    ],
)
def test_writes_are_refused_and_the_file_is_unchanged(db_file, statement, refused):
    before = digest(db_file)
    result = SQLToolGroup(db_file).call("sql", {"query": statement})
    assert not result.ok
    assert result.error.startswith(f"not allowed: {refused}")
    assert "read-only" in result.error
    assert result.text.startswith("Error: not allowed")
    assert digest(db_file) == before
    assert run_read_only_query(db_file, "SELECT count(*) FROM employees").rows == [(5,)]


def test_read_only_connection_refuses_writes_without_the_authorizer(db_file):
    """The URI mode=ro / query_only layer alone already refuses writes."""
    before = digest(db_file)
    conn = _connect_read_only(db_file)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
            conn.execute("INSERT INTO departments VALUES (3, 'Legal')")
        with pytest.raises(sqlite3.OperationalError, match="too many attached"):
            conn.execute("ATTACH DATABASE ':memory:' AS other")
    finally:
        conn.close()
    assert digest(db_file) == before


def test_schema_introspection_is_allowed(db_file):
    group = SQLToolGroup(db_file)
    tables = group.call("sql", {"query": "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"})
    assert tables.data.rows == [("departments",), ("employees",), ("notes",)]
    columns = group.call("sql", {"query": "PRAGMA table_info(departments)"})
    assert columns.ok and [row[1] for row in columns.data.rows] == ["id", "name"]
    keys = group.call("sql", {"query": "PRAGMA foreign_key_list(employees)"})
    assert keys.ok and keys.data.rows[0][2] == "departments"


def test_recursive_cte_times_out(db_file):
    slow = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    group = SQLToolGroup(db_file, timeout_s=0.3)
    start = time.monotonic()
    result = group.call("sql", {"query": slow})
    elapsed = time.monotonic() - start
    assert not result.ok
    assert result.error == "query timed out after 0.3 s and was interrupted"
    assert 0.3 <= elapsed < 3.0
    # a bounded recursive CTE is fine
    bounded = group.call(
        "sql",
        {
            "query": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4) "
            "SELECT sum(i) FROM n"
        },
    )
    assert bounded.data.rows == [(10,)]


@pytest.mark.parametrize(
    "query, message",
    [
        ("SELECT * FROM missing_table", "OperationalError: no such table: missing_table"),
        ("SELEC name FROM employees", 'OperationalError: near "SELEC": syntax error'),
        ("SELECT 1; SELECT 2", "ProgrammingError: You can only execute one statement at a time."),
        ("   ", "the SQL query is empty"),
    ],
)
def test_query_errors_are_reported(db_file, query, message):
    result = SQLToolGroup(db_file).call("sql", {"query": query})
    assert not result.ok and result.error == message


def test_bad_tool_arguments_come_back_as_results(db_file):
    box = Toolbox()
    box.add_group(SQLToolGroup(db_file))
    assert box.qualified_names() == ["sqlite__sql"]
    missing = box.call("sql", {})
    assert not missing.ok and "'query' is a required property" in missing.error
    wrong_type = box.call("sqlite__sql", {"query": 3})
    assert not wrong_type.ok and "query" in wrong_type.error


def test_run_read_only_query_raises_for_unopenable_file(tmp_path):
    not_a_db = tmp_path / "junk.sqlite"
    not_a_db.write_text("this is not a database")
    with pytest.raises(SQLQueryError, match="file is not a database"):
        run_read_only_query(not_a_db, "SELECT 1 FROM sqlite_master")


def test_format_result_table_without_columns():
    assert format_result_table(QueryResult([], [], False)) == "The statement ran and returned no columns."


def test_resolve_db_file_accepts_both_layouts(tmp_path):
    flat = tmp_path / "flat.sqlite"
    nested = tmp_path / "nested" / "nested.sqlite"
    nested.parent.mkdir()
    for path in (flat, nested):
        sqlite3.connect(path).close()
    assert resolve_db_file(tmp_path, "flat") == flat
    assert resolve_db_file(str(tmp_path), "nested") == nested


def test_resolve_db_file_errors_name_the_paths(tmp_path):
    with pytest.raises(ValueError) as info:
        resolve_db_file(tmp_path, "absent")
    assert str(tmp_path / "absent.sqlite") in str(info.value)
    assert str(tmp_path / "absent" / "absent.sqlite") in str(info.value)
    with pytest.raises(ValueError, match="plain name"):
        resolve_db_file(tmp_path, "../etc")
    with pytest.raises(ValueError, match="non-empty string"):
        resolve_db_file(tmp_path, "")


def test_group_validates_its_settings(db_file, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        SQLToolGroup(tmp_path / "nope.sqlite")
    with pytest.raises(ValueError, match="max_rows"):
        SQLToolGroup(db_file, max_rows=0)
    with pytest.raises(ValueError, match="timeout_s"):
        SQLToolGroup(db_file, timeout_s=-1)


# Size and time caps: the SQL is model output, so nothing it asks for may exhaust the process (security review #4).

FORTY_ROWS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 40)"


@pytest.mark.parametrize("query", ["SELECT randomblob(1000000000)", "SELECT zeroblob(200000000)"])
def test_a_value_past_the_value_cap_is_refused_naming_the_cap(db_file, query):
    result = SQLToolGroup(db_file).call("sql", {"query": query})
    assert not result.ok and result.data is None
    assert result.error.startswith("a value would be longer than 1000000 bytes, the cap on one value (max_value_bytes")


def test_the_value_cap_is_a_setting_and_stored_values_past_it_are_refused(db_file):
    group = SQLToolGroup(db_file, max_value_bytes=12)
    assert group.call("sql", {"query": "SELECT name FROM employees WHERE id = 1"}).data.rows == [("Ann",)]
    long_body = group.call("sql", {"query": "SELECT body FROM notes WHERE id = 2"})
    assert not long_body.ok and "longer than 12 bytes" in long_body.error and "max_value_bytes=12" in long_body.error


def test_the_review_query_no_longer_returns_hundreds_of_megabytes(db_file):
    query = f"{FORTY_ROWS} SELECT zeroblob(10000000) FROM r"
    with pytest.raises(SQLQueryError, match=r"cap on one value \(max_value_bytes=1000000\)"):
        # a deadline far away: the value cap, not the clock, must stop it (a 1 ms deadline raced the cap under load)
        run_read_only_query(db_file, query, timeout_s=30, max_rows=100_000)


def test_fetched_bytes_are_capped_naming_the_cap(db_file):
    query = f"{FORTY_ROWS} SELECT zeroblob(900000) FROM r"
    with pytest.raises(SQLQueryError) as info:
        run_read_only_query(db_file, query, max_rows=100_000, max_result_bytes=5_000_000)
    assert str(info.value).startswith("the result passed the 5000000-byte cap on a query's result (max_result_bytes)")
    assert "at row 6" in str(info.value)  # 5 rows of 900000 bytes fit, the sixth does not
    assert len(run_read_only_query(db_file, query, max_rows=100_000, max_result_bytes=40_000_000).rows) == 40


def test_one_wide_row_cannot_pass_the_result_cap(db_file):
    # 300 columns of 0.99 MB each would be one 300 MB row, made and copied before any row count is checked
    query = "SELECT " + ", ".join(f"zeroblob(990000) AS c{i}" for i in range(300))
    result = SQLToolGroup(db_file).call("sql", {"query": query})
    assert not result.ok
    assert result.error.startswith("a value would be longer than 13333 bytes, the cap on one value (max_value_bytes=")
    assert "one row of this query's 300 columns fits max_result_bytes (4000000)" in result.error
    narrow = "SELECT " + ", ".join(f"zeroblob(10000) AS c{i}" for i in range(300))
    assert SQLToolGroup(db_file).call("sql", {"query": narrow}).ok  # 3 MB in all: within the cap


def test_the_query_text_is_capped_naming_the_cap(db_file):
    query = "SELECT 1 -- " + "x" * 200
    result = SQLToolGroup(db_file, max_sql_bytes=100).call("sql", {"query": query})
    assert not result.ok and result.error == "the SQL query is 212 bytes, over the 100-byte cap (max_sql_bytes)"
    assert SQLToolGroup(db_file, max_sql_bytes=212).call("sql", {"query": query}).ok


def test_the_deadline_stops_a_query_made_of_a_few_long_operations(db_file):
    # ~10 rows of one ~0.15 s string search each: a few hundred VM operations in all, so a progress handler called
    # every 1000 operations never ran and the query returned after ~1.5 s; the watchdog interrupts it at 0.05 s
    # (SQLite checks its interrupt flag between operations, so the running one finishes first)
    search = "instr(printf('%.*c', 999999 - n, 'a'), printf('%.*c', 2000, 'a') || 'b')"
    query = f"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 10) SELECT {search} FROM r"
    start = time.monotonic()
    with pytest.raises(SQLQueryError, match=r"^query timed out after 0.05 s and was interrupted$"):
        run_read_only_query(db_file, query, timeout_s=0.05)
    assert time.monotonic() - start < 0.9


def test_a_huge_printf_repeat_count_answers_null_at_once(db_file):
    # SQLite answers NULL here too (the text would pass the value cap) but only after looping 2**31 times in one
    # uninterruptible step (17 s); ordinary formatting still goes to SQLite's printf
    start = time.monotonic()
    huge = run_read_only_query(db_file, "SELECT printf('%.*c', 2147483647, 'x'), format('%.2000000000c', 'y')")
    assert huge.rows == [(None, None)] and time.monotonic() - start < 0.5
    formatted = run_read_only_query(db_file, "SELECT printf('%.3c|%5.2f|%d|%%|%.*s', 'x', 3.14159, 42, 2, 'abc')")
    assert formatted.rows == [("xxx| 3.14|42|%|ab",)]


def test_long_like_patterns_are_refused_naming_the_cap(db_file):
    query = "SELECT 'abc' LIKE ('%' || printf('%.*c', 5000, 'a') || 'b')"
    result = SQLToolGroup(db_file).call("sql", {"query": query})
    assert not result.ok and result.error == "a LIKE or GLOB pattern is longer than 1000 bytes, the cap on one pattern"


def test_the_caps_are_validated(db_file):
    for key in ("max_value_bytes", "max_result_bytes", "max_sql_bytes"):
        with pytest.raises(ValueError, match=f"SQLToolGroup: {key} must be a positive number, got 0"):
            SQLToolGroup(db_file, **{key: 0})
