"""`text2sql`: questions about generated SQLite company databases, answered with the read-only `sql` tool.

The agent explores the schema and data with `sql` (skyrl-gym's `SQLToolGroup`: read-only, time-limited) and answers
with its final query in `<answer>SELECT ...</answer>`; the reward is execution match against the gold query
(skyrl-gym's text2sql scoring: the same rows, in any order).
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any, Optional

from skyrl_agent.registry import register_task
from skyrl_agent.tasks.base import Task
from skyrl_agent.trajectory import AgentTrajectory
from skyrl_gym.envs.text2sql.scoring import score_solution
from skyrl_gym.tools import ToolGroup
from skyrl_gym.tools.sql import SQLToolGroup

DEPARTMENTS = ["sales", "research", "support", "finance", "legal", "design"]
CITIES = ["Oslo", "Lima", "Pune", "Kyoto", "Accra", "Quito", "Perth", "Turin"]
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Mo", "Nia", "Oto"]


def build_database(path: Path, seed: int) -> None:
    """A company database: `departments(name, city)` and `employees(id, name, dept, salary, hired)`."""
    rng = random.Random(f"text2sql/db/{seed}")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(f".{random.random():.8f}.tmp")
    with sqlite3.connect(staging) as db:
        db.execute("CREATE TABLE departments (name TEXT PRIMARY KEY, city TEXT)")
        db.execute(
            "CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT, dept TEXT REFERENCES departments(name), "
            "salary INTEGER, hired INTEGER)"
        )
        departments = rng.sample(DEPARTMENTS, 4)
        db.executemany("INSERT INTO departments VALUES (?, ?)", [(d, rng.choice(CITIES)) for d in departments])
        for index in range(rng.randint(12, 20)):
            row = (
                index + 1,
                rng.choice(NAMES),
                rng.choice(departments),
                rng.randrange(30, 120) * 1000,
                rng.randint(2010, 2025),
            )
            db.execute("INSERT INTO employees VALUES (?, ?, ?, ?, ?)", row)
    staging.replace(path)


def _questions(db_file: Path, rng: random.Random) -> tuple[str, str]:
    with sqlite3.connect(db_file) as db:
        departments = [row[0] for row in db.execute("SELECT name FROM departments")]
    dept, year = rng.choice(departments), rng.randint(2012, 2023)
    return rng.choice(
        [
            (f"How many employees work in {dept}?", f"SELECT COUNT(*) FROM employees WHERE dept = '{dept}'"),
            (f"What is the highest salary in {dept}?", f"SELECT MAX(salary) FROM employees WHERE dept = '{dept}'"),
            (
                f"Which employees were hired after {year}? Give their ids.",
                f"SELECT id FROM employees WHERE hired > {year}",
            ),
            (
                "In which city is the department of employee 1?",
                "SELECT d.city FROM departments d JOIN employees e ON e.dept = d.name WHERE e.id = 1",
            ),
            ("What is the average salary per department?", "SELECT dept, AVG(salary) FROM employees GROUP BY dept"),
        ]
    )


@register_task("text2sql", builtin=True)
class Text2SQLTask(Task):
    """Questions over `databases` generated company databases kept in `db_dir` (default: a cache folder)."""

    system_prompt = (
        "Use the sql tool to explore the database. Answer with one SQL query as <answer>SELECT ...</answer>."
    )

    def __init__(self, db_dir: Optional[str] = None, databases: int = 4) -> None:
        if db_dir is None:
            from skyrl_train.recipes.embedded import cache_root

            db_dir = str(cache_root() / "agent_text2sql")
        self.db_dir, self.databases = Path(db_dir), databases

    def db_file(self, db_id: str) -> Path:
        """The database of `db_id`, built on first use."""
        path = self.db_dir / f"{db_id}.sqlite"
        if not path.is_file():
            build_database(path, int(db_id.rsplit("_", 1)[1]))
        return path

    def build_dataset(self, size: int, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
        """`size` questions spread over the databases (the same databases for every split)."""
        rng = random.Random(f"text2sql/{split}/{seed}")
        rows = []
        for index in range(size):
            db_id = f"company_{rng.randrange(self.databases)}"
            question, gold = _questions(self.db_file(db_id), rng)
            rows.append({"id": f"{split}-{seed}-{index}", "prompt": question, "db_id": db_id, "gold_sql": gold})
        return rows

    def tool_groups(self, instance: dict[str, Any]) -> list[ToolGroup]:
        """The read-only `sql` tool on the instance's database."""
        return [SQLToolGroup(self.db_file(instance["db_id"]))]

    def evaluate(self, instance: dict[str, Any], trajectory: AgentTrajectory) -> float:
        """Execution match of the answered query against the gold one."""
        if not trajectory.final_answer:
            return 0.0
        reward, _ = score_solution(self.db_file(instance["db_id"]), trajectory.final_answer, instance["gold_sql"])
        return reward
