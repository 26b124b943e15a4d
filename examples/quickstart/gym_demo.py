"""Quickstart demo of skyrl-gym: write synthetic datasets, then play their episodes with two scripted policies.

The policies are scripted, not learned:
  solver  answers every question exactly, computing the answer from the question text alone;
  noisy   answers like the solver but gives a deliberately wrong answer with probability --noise (seeded).
Each episode builds the env by name from the dataset row, as a trainer does:
`skyrl_gym.make(row["env_class"], env_config={}, extras=<row without prompt>)`, then `init(prompt)` and one `step`.

    python examples/quickstart/gym_demo.py --episodes 50 --seed 0

The last line reads `gym demo: <n> episodes, mean reward solver=<x> noisy=<y>` (n counts both policies' episodes).
The exit status is 1 if the exact solver does not score 1.0, which means an env or generator is broken.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import skyrl_gym
from skyrl_gym.envs.synthetic import TASKS, countdown
from skyrl_gym.envs.synthetic.generate import read_rows, write_dataset

Policy = Callable[[str, str], str]  # (task name, question) -> response


def solver_policy(task: str, question: str) -> str:
    """The exact solver: the family's `solve` applied to the question text (it never sees the ground truth)."""
    return TASKS[task].solve(question)


def wrong_answer(task: str, question: str, correct: str, rng: random.Random) -> str:
    """A response that is certainly wrong but well formed, derived from the correct answer."""
    if task in ("arithmetic", "addition"):
        return str(int(correct) + rng.choice((-2, -1, 1, 2)))
    if task == "countdown":  # a single given number is a valid expression; targets never equal a given number
        numbers, _ = countdown.parse_question(question)
        return str(rng.choice(numbers))
    if task == "reverse":
        return ("b" if correct[0] == "a" else "a") + correct[1:]
    if task == "binary":  # the shown work kept, the answer's last bit flipped
        work, _, rest = correct.rpartition("<answer>")
        bits, _, tail = rest.partition("</answer>")
        return f"{work}<answer>{bits[:-1]}{'1' if bits[-1] == '0' else '0'}</answer>{tail}"
    raise ValueError(f"no wrong-answer rule for task {task!r}")


def make_noisy_policy(noise: float, seed: int) -> Policy:
    """The noisy solver: the exact answer, except with probability `noise` a wrong one (own seeded RNG)."""
    rng = random.Random(f"noisy-policy/{seed}")

    def policy(task: str, question: str) -> str:
        correct = solver_policy(task, question)
        return wrong_answer(task, question, correct, rng) if rng.random() < noise else correct

    return policy


def play_episode(row: dict[str, Any], policy: Policy) -> dict[str, Any]:
    """Play one single-turn episode of a dataset row; return the step output plus the response."""
    extras = {key: value for key, value in row.items() if key != "prompt"}
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=extras)
    try:
        prompt, _ = env.init(row["prompt"])
        response = policy(row["env_class"], prompt[-1]["content"])
        output = env.step(response)
    finally:
        env.close()
    return {**output, "response": response, "question": prompt[-1]["content"]}


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    """Print a table with rich when it is installed, else as aligned plain text."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
        print(title)
        for line in [header, *rows]:
            print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)))
        return
    table = Table(title=title)
    for index, name in enumerate(header):
        table.add_column(name, justify="left" if index == 0 else "right")
    for line in rows:
        table.add_row(*line)
    Console().print(table)


def run(args: argparse.Namespace, out_dir: Path) -> int:
    """Generate the datasets under `out_dir`, play the episodes, print the results; return the exit status."""
    policies: dict[str, Policy] = {"solver": solver_policy, "noisy": make_noisy_policy(args.noise, args.seed)}
    rewards: dict[str, list[float]] = {name: [] for name in policies}
    table_rows: list[list[str]] = []
    for task in args.tasks:
        paths = write_dataset(
            out_dir / task,
            task,
            train_size=args.episodes,
            test_size=args.episodes,
            difficulty=args.difficulty,
            seed=args.seed,
        )
        rows = read_rows(paths["test"])
        means = []
        for name, policy in policies.items():
            results = [play_episode(row, policy) for row in rows]
            task_rewards = [result["reward"] for result in results]
            rewards[name].extend(task_rewards)
            means.append(sum(task_rewards) / len(task_rewards))
            if name == "solver":
                example = results[0]
                print(
                    f"[{task}] {example['question']!r} -> {example['response']!r}: reward {example['reward']:.1f} "
                    f"({example['metadata']['reason']})"
                )
        table_rows.append([task, str(args.difficulty), str(len(rows)), f"{means[0]:.3f}", f"{means[1]:.3f}"])
    print_table(
        f"mean reward per episode (datasets in {out_dir})",
        ["task", "difficulty", "episodes/policy", "solver (exact)", f"noisy (p={args.noise:g})"],
        table_rows,
    )
    solver_mean = sum(rewards["solver"]) / len(rewards["solver"])
    noisy_mean = sum(rewards["noisy"]) / len(rewards["noisy"])
    episodes = sum(len(values) for values in rewards.values())
    print(f"gym demo: {episodes} episodes, mean reward solver={solver_mean:.3f} noisy={noisy_mean:.3f}")
    if solver_mean != 1.0:
        print("error: the exact solver should score 1.0; an environment or generator is broken")
        return 1
    return 0


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Command-line options of the demo."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=50, help="episodes per policy per task family (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the datasets and of the noisy policy (default 0)")
    parser.add_argument("--noise", type=float, default=0.3, help="noisy policy's wrong-answer probability (0.3)")
    parser.add_argument("--difficulty", type=int, default=2, help="difficulty of every family (default 2)")
    parser.add_argument(
        "--tasks", default=",".join(TASKS), help=f"comma-separated families (default {','.join(TASKS)})"
    )
    parser.add_argument("--out", default=None, help="directory for the datasets (default: a temporary directory)")
    args = parser.parse_args(argv)
    args.tasks = [task.strip() for task in args.tasks.split(",") if task.strip()]
    unknown = [task for task in args.tasks if task not in TASKS]
    if unknown or not args.tasks:
        parser.error(f"--tasks must name families from {sorted(TASKS)}, got {args.tasks}")
    if args.episodes < 1:
        parser.error("--episodes must be at least 1")
    if not 0.0 <= args.noise <= 1.0:
        parser.error("--noise must be a probability in [0, 1]")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the demo in `--out` or a temporary directory."""
    args = parse_args(argv)
    if args.out is not None:
        return run(args, Path(args.out))
    with tempfile.TemporaryDirectory(prefix="skyrl-gym-demo-") as tmp:
        return run(args, Path(tmp))


if __name__ == "__main__":
    raise SystemExit(main())
