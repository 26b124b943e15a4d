"""Tests of the text2sql env on real SQLite files: full trajectories, execution-match rewards and config errors."""

import hashlib
import sqlite3
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.envs.text2sql.env import NO_ACTION_HINT, Text2SQLEnv, strip_code_fence
from skyrl_gym.envs.text2sql.scoring import rows_match, score_solution

SHOP = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), amount REAL);
INSERT INTO customers VALUES (1, 'Ann', 'Oslo'), (2, 'Bob', 'Lima'), (3, 'Cid', 'Oslo');
INSERT INTO orders VALUES (10, 1, 20.0), (11, 1, 5.5), (12, 2, 7.0), (13, 3, 20.0);
"""
SCHOOL = """
CREATE TABLE students (id INTEGER PRIMARY KEY, name TEXT, grade INTEGER);
INSERT INTO students VALUES (1, 'Uma', 9), (2, 'Vic', 10), (3, 'Wes', 9);
"""
GOLD = "SELECT name FROM customers WHERE city = 'Oslo' ORDER BY name"
PROMPT = [{"role": "user", "content": "Which customers live in Oslo?"}]


def make_db(path: Path, script: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(script)
    conn.commit()
    conn.close()


@pytest.fixture
def db_dir(tmp_path: Path) -> Path:
    make_db(tmp_path / "shop.sqlite", SHOP)  # flat layout
    make_db(tmp_path / "school" / "school.sqlite", SCHOOL)  # nested layout
    return tmp_path


def make_env(db_dir, gold=GOLD, db_id="shop", **config) -> Text2SQLEnv:
    extras = {"db_id": db_id, "reward_spec": {"method": "rule", "ground_truth": gold}}
    return Text2SQLEnv({"db_path": str(db_dir), **config}, extras)


def test_full_trajectory_query_error_then_correct_solution(db_dir, step_output):
    env = skyrl_gym.make(
        "text2sql",
        env_config={"db_path": str(db_dir)},
        extras={"db_id": "shop", "reward_spec": {"method": "rule", "ground_truth": GOLD}},
    )
    assert isinstance(env, Text2SQLEnv) and env.max_turns == 5
    prompt, info = env.init(PROMPT)
    assert prompt == PROMPT and info == {"db_id": "shop"}

    first = env.step("Let me look.\n<sql>SELECT name, city FROM customers ORDER BY id</sql>")
    table = (
        "<observation>\n| name | city |\n| --- | --- |\n| Ann | Oslo |\n| Bob | Lima |\n| Cid | Oslo |\n"
        "(3 rows)\nYou have 4 turns left.\n</observation>"
    )
    assert first == step_output(0.0, False, {}, table)

    second = env.step("<sql>SELECT nme FROM customers</sql>")
    assert second["done"] is False and second["reward"] == 0.0
    assert second["observations"][0]["content"] == (
        "<observation>\nError: OperationalError: no such column: nme\nYou have 3 turns left.\n</observation>"
    )
    assert second["metadata"]["tool_error"] == "OperationalError: no such column: nme"

    # same rows as the gold query, different order and different column alias: a match
    solution = "SELECT c.name AS who FROM customers c WHERE c.city = 'Oslo' ORDER BY c.id DESC"
    final = env.step(f"<solution>{solution}</solution>")
    assert final["done"] is True and final["reward"] == 1.0 and final["observations"] == []
    assert final["metadata"]["correct"] is True
    assert env.get_metrics() == {
        "turns": 3,
        "episode_reward": 1.0,
        "sql_calls": 2,
        "sql_errors": 1,
        "gave_solution": True,
        "solved": True,
    }
    env.close()


def test_wrong_solution_scores_zero(db_dir):
    env = make_env(db_dir)
    env.init(PROMPT)
    out = env.step("<solution>SELECT name FROM customers</solution>")
    assert out["done"] and out["reward"] == 0.0
    assert out["metadata"] == {
        "solution": "SELECT name FROM customers",
        "correct": False,
        "predicted_rows": 3,
        "gold_rows": 2,
    }


def test_failing_solution_scores_zero_with_reason(db_dir):
    env = make_env(db_dir)
    env.init(PROMPT)
    out = env.step("<solution>DELETE FROM customers</solution>")
    assert out["done"] and out["reward"] == 0.0
    assert out["metadata"]["solution_error"].startswith("not allowed: DELETE")


def test_solution_wins_over_sql_in_the_same_turn(db_dir):
    env = make_env(db_dir)
    env.init(PROMPT)
    out = env.step(f"<sql>SELECT 1</sql> final: <solution>{GOLD}</solution>")
    assert out["done"] and out["reward"] == 1.0


def test_order_matters_option(db_dir):
    reversed_sql = "<solution>SELECT name FROM customers WHERE city = 'Oslo' ORDER BY name DESC</solution>"
    loose = make_env(db_dir)
    loose.init(PROMPT)
    assert loose.step(reversed_sql)["reward"] == 1.0
    strict = make_env(db_dir, order_matters=True)
    strict.init(PROMPT)
    assert strict.step(reversed_sql)["reward"] == 0.0
    strict.init(PROMPT)
    assert strict.step(f"<solution>{GOLD}</solution>")["reward"] == 1.0


def test_duplicates_count_in_the_multiset_comparison(db_dir):
    gold = "SELECT amount FROM orders WHERE amount = 20.0"  # two rows of 20.0
    env = make_env(db_dir, gold=gold)
    env.init(PROMPT)
    assert env.step("<solution>SELECT DISTINCT amount FROM orders WHERE amount = 20.0</solution>")["reward"] == 0.0
    env.init(PROMPT)
    assert env.step("<solution>SELECT 20 FROM orders WHERE amount > 19</solution>")["reward"] == 1.0  # 20 == 20.0


def test_rows_match_hand_worked():
    assert rows_match([(1, "a"), (2, "b")], [(2, "b"), (1, "a")])
    assert not rows_match([(1, "a"), (2, "b")], [(2, "b"), (1, "a")], order_matters=True)
    assert not rows_match([(1,), (1,)], [(1,)])
    assert rows_match([(1,)], [(1.0,)])
    assert not rows_match([("1",)], [(1,)])
    assert not rows_match([(1, 2)], [(2, 1)])  # column order matters
    assert rows_match([], [])
    assert rows_match([(None,)], [(None,)])


def test_format_penalty_on_final_turn_without_solution(db_dir):
    env = make_env(db_dir, max_turns=2, format_penalty=-0.5)
    env.init(PROMPT)
    first = env.step("<sql>SELECT count(*) FROM orders</sql>")
    assert first["observations"][0]["content"].endswith(
        "(1 row)\nYou have 1 turn left: it must give your final answer as <solution>SELECT ...</solution>.\n"
        "</observation>"
    )
    last = env.step("<sql>SELECT 1</sql>")
    assert last["done"] and last["reward"] == -0.5 and last["observations"] == []
    assert last["metadata"] == {"truncated": True, "no_solution": True}
    assert env.get_metrics()["episode_reward"] == -0.5


def test_default_penalty_is_zero_and_max_turns_from_extras(db_dir):
    env = Text2SQLEnv(
        {"db_path": str(db_dir)}, {"db_id": "shop", "max_turns": 1, "reward_spec": {"ground_truth": GOLD}}
    )
    env.init(PROMPT)
    out = env.step("I do not know.")
    assert out["done"] and out["reward"] == 0.0 and out["metadata"]["no_solution"]


def test_turn_without_action_gets_a_hint(db_dir):
    env = make_env(db_dir)
    env.init(PROMPT)
    out = env.step("Thinking about it...")
    assert not out["done"] and out["metadata"] == {"no_action": True}
    assert (
        out["observations"][0]["content"] == f"<observation>\n{NO_ACTION_HINT}\nYou have 4 turns left.\n</observation>"
    )


def test_nested_layout_and_extra_info_db_id(db_dir):
    extras = {
        "extra_info": {"db_id": "school"},
        "reward_spec": {"ground_truth": "SELECT name FROM students WHERE grade = 9"},
    }
    env = Text2SQLEnv({"db_path": db_dir}, extras)
    assert env.db_file == db_dir / "school" / "school.sqlite"
    env.init(PROMPT)
    assert env.step("<solution>SELECT name FROM students WHERE grade < 10</solution>")["reward"] == 1.0


def test_write_attempts_leave_the_database_unchanged(db_dir):
    path = db_dir / "shop.sqlite"
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    env = make_env(db_dir)
    env.init(PROMPT)
    out = env.step("<sql>DROP TABLE orders</sql>")
    assert "Error: not allowed" in out["observations"][0]["content"]
    out = env.step("<sql>INSERT INTO customers VALUES (4, 'Dan', 'Oslo')</sql>")
    assert "Error: not allowed: INSERT" in out["observations"][0]["content"]
    assert env.step(f"<solution>{GOLD}</solution>")["reward"] == 1.0
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_row_cap_and_timeout_from_config(db_dir):
    env = make_env(db_dir, max_rows=1, query_timeout_s=0.2)
    env.init(PROMPT)
    out = env.step("<sql>SELECT id FROM orders ORDER BY id</sql>")
    assert "| 10 |\n(showing the first 1 rows; the result has more rows)" in out["observations"][0]["content"]
    slow = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"
    out = env.step(f"<sql>{slow}</sql>")
    assert out["metadata"]["tool_error"] == "query timed out after 0.2 s and was interrupted"


def test_size_caps_from_config_reach_the_tool_and_the_scorer(db_dir):
    env = make_env(db_dir, max_result_bytes=150, max_sql_bytes=60, max_value_bytes=100, score_max_result_bytes=30)
    env.init(PROMPT)
    out = env.step("<sql>SELECT * FROM customers, orders</sql>")  # 12 rows of ~40 bytes
    assert out["metadata"]["tool_error"].startswith("the result passed the 150-byte cap on a query's result")
    out = env.step(f"<sql>SELECT '{'x' * 60}'</sql>")
    assert out["metadata"]["tool_error"] == "the SQL query is 69 bytes, over the 60-byte cap (max_sql_bytes)"
    out = env.step("<sql>SELECT zeroblob(101)</sql>")
    assert "longer than 100 bytes, the cap on one value (max_value_bytes=100)" in out["metadata"]["tool_error"]
    out = env.step("<solution>SELECT name FROM customers, orders</solution>")  # 12 rows of 3 bytes
    assert out["reward"] == 0.0 and "the 30-byte cap on a query's result" in out["metadata"]["solution_error"]


def test_score_row_cap_and_timeout_from_config_reach_the_scorer(db_dir):
    env = make_env(db_dir, score_max_rows=2, score_timeout_s=0.2)
    env.init(PROMPT)
    out = env.step("<solution>SELECT name FROM customers</solution>")  # 3 rows; the gold query has 2
    assert out["reward"] == 0.0 and out["metadata"]["solution_error"] == "the solution returns more than 2 rows"
    env.init(PROMPT)
    slow = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"
    out = env.step(f"<solution>{slow}</solution>")
    assert out["reward"] == 0.0 and "timed out after 0.2 s" in out["metadata"]["solution_error"]


def test_the_scorer_refuses_a_huge_value_from_the_solution(db_dir):
    reward, details = score_solution(db_dir / "shop.sqlite", "SELECT zeroblob(200000000)", GOLD)
    assert reward == 0.0
    assert details["solution_error"].startswith("a value would be longer than 1000000 bytes, the cap on one value")
    with pytest.raises(ValueError, match=r"the gold SQL .* the cap on one value .* score_max_result_bytes"):
        score_solution(db_dir / "shop.sqlite", GOLD, "SELECT randomblob(2000000)")


def test_missing_database_is_a_value_error_naming_the_path(db_dir):
    with pytest.raises(ValueError, match=str(db_dir / "nowhere.sqlite")):
        make_env(db_dir, db_id="nowhere")


def test_missing_db_path_is_a_value_error():
    with pytest.raises(ValueError, match=r"env_config\['db_path'\] is required"):
        Text2SQLEnv({}, {"db_id": "shop", "reward_spec": {"ground_truth": GOLD}})


@pytest.mark.parametrize(
    "config_overrides, extras, message",
    [
        ({}, {"reward_spec": {"ground_truth": GOLD}}, "db_id"),
        ({}, {"db_id": "shop", "reward_spec": {"ground_truth": None}}, "reward_spec.ground_truth"),
        ({}, {"db_id": "shop", "reward_spec": {"ground_truth": "  "}}, "reward_spec.ground_truth"),
        ({}, {"db_id": "shop", "reward_spec": {"ground_truth": ["SELECT 1"]}}, "reward_spec.ground_truth"),
        ({}, {"db_id": "shop", "reward_spec": {}}, "ground_truth"),
        ({"format_penalty": 0.5}, {"db_id": "shop", "reward_spec": {"ground_truth": GOLD}}, "format_penalty"),
        ({"max_rows": 0}, {"db_id": "shop", "reward_spec": {"ground_truth": GOLD}}, "max_rows"),
        ({"order_matters": "yes"}, {"db_id": "shop", "reward_spec": {"ground_truth": GOLD}}, "order_matters"),
    ],
)
def test_bad_configuration_raises_value_error(db_dir, config_overrides, extras, message):
    with pytest.raises(ValueError, match=message):
        Text2SQLEnv({"db_path": str(db_dir), **config_overrides}, extras)


def test_failing_gold_sql_is_a_value_error(db_dir):
    env = make_env(db_dir, gold="SELECT * FROM no_such_table")
    env.init(PROMPT)
    with pytest.raises(ValueError, match="reward_spec.ground_truth: the gold SQL"):
        env.step("<solution>SELECT 1</solution>")


def test_score_solution_reports_oversized_predictions(db_dir):
    reward, details = score_solution(db_dir / "shop.sqlite", "SELECT id FROM orders", "SELECT 1", max_rows=2)
    assert reward == 0.0 and details == {"solution_error": "the solution returns more than 2 rows"}


@pytest.mark.parametrize(
    "text, sql",
    [
        ("```sql\nSELECT 1\n```", "SELECT 1"),
        ("```SELECT 1```", "SELECT 1"),
        ("```\nSELECT a\nFROM t\n```", "SELECT a\nFROM t"),
        ("SELECT '```'", "SELECT '```'"),
        (None, None),
    ],
)
def test_strip_code_fence(text, sql):
    assert strip_code_fence(text) == sql


def test_fenced_solution_is_scored(db_dir):
    env = make_env(db_dir)
    env.init(PROMPT)
    assert env.step(f"<solution>\n```sql\n{GOLD}\n```\n</solution>")["reward"] == 1.0
