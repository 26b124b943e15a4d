"""Synthetic task families (arithmetic, addition, countdown, reverse, binary): seeded problem generators, exact rule rewards, and envs.

Each family module has `make_problem(rng, difficulty)`, `count_problems(difficulty)`, `solve(question)`,
`parse_ground_truth(value)`, `score_response(response, truth, ...)` and its env class. `generate` writes datasets.
"""

from __future__ import annotations

from skyrl_gym.envs.synthetic import addition, arithmetic, binary, countdown, reverse
from skyrl_gym.envs.synthetic.addition import AdditionEnv
from skyrl_gym.envs.synthetic.arithmetic import ArithmeticEnv
from skyrl_gym.envs.synthetic.base import MAX_DIFFICULTY, Problem, Score, SyntheticEnv, SyntheticTask, extract_answer
from skyrl_gym.envs.synthetic.binary import BinaryEnv
from skyrl_gym.envs.synthetic.countdown import CountdownEnv
from skyrl_gym.envs.synthetic.reverse import ReverseEnv

TASKS: dict[str, SyntheticTask] = {
    task.name: task for task in (arithmetic.TASK, addition.TASK, countdown.TASK, reverse.TASK, binary.TASK)
}
"""The built-in families by name (the name is also the env id)."""


def get_task(name: str) -> SyntheticTask:
    """The family called `name`; ValueError listing the known ones otherwise."""
    if name not in TASKS:
        raise ValueError(f"unknown synthetic task {name!r}; choose one of {sorted(TASKS)}")
    return TASKS[name]


__all__ = [
    "TASKS",
    "get_task",
    "MAX_DIFFICULTY",
    "Problem",
    "Score",
    "SyntheticEnv",
    "SyntheticTask",
    "extract_answer",
    "AdditionEnv",
    "ArithmeticEnv",
    "BinaryEnv",
    "CountdownEnv",
    "ReverseEnv",
]
