"""Write train/test datasets of a synthetic family (parquet or jsonl), deduplicated by question, from a seed.

    python -m skyrl_gym.envs.synthetic.generate --task arithmetic --train-size 2000 --test-size 200 \\
        --difficulty 2 --seed 0 --out DIR [--format parquet|jsonl]

writes DIR/train.parquet and DIR/test.parquet (or .jsonl). Rows follow the dataset contract: `data_source`,
`prompt` ([{"role": "user", "content": question}]), `env_class`, `reward_spec` ({"method": "rule", "ground_truth"}),
`extra_info` ({"difficulty", "index", "split", "question", "answer"}); `answer` is a reference response.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

from skyrl_gym.envs.synthetic import TASKS, get_task
from skyrl_gym.envs.synthetic.base import MAX_DIFFICULTY, Problem, SyntheticTask, check_difficulty

FORMATS = ("parquet", "jsonl")
PROGRESS_THRESHOLD = 10_000
"""Generating at least this many rows shows a tqdm progress bar (unless `progress` says otherwise)."""


def _resolve(task: Union[str, SyntheticTask]) -> SyntheticTask:
    return task if isinstance(task, SyntheticTask) else get_task(task)


def _check_size(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def make_row(
    task: SyntheticTask, problem: Problem, *, difficulty: int, index: int, split: str, prompt_template: str
) -> dict[str, Any]:
    """One dataset row for a problem (the contract's five columns)."""
    return {
        "data_source": task.data_source,
        "prompt": [{"role": "user", "content": prompt_template.format(question=problem["question"])}],
        "env_class": task.env_class,
        "reward_spec": {"method": "rule", "ground_truth": problem["ground_truth"]},
        "extra_info": {
            "difficulty": difficulty,
            "index": index,
            "split": split,
            "question": problem["question"],
            "answer": problem["answer"],
        },
    }


def generate_splits(
    task: Union[str, SyntheticTask],
    *,
    train_size: int,
    test_size: int,
    difficulty: int,
    seed: int,
    prompt_template: str = "{question}",
    progress: Optional[bool] = None,
) -> dict[str, list[dict[str, Any]]]:
    """Generate `{"train": rows, "test": rows}` with no question repeated within or across the splits.

    The test split is drawn first, so it depends only on (task, difficulty, seed, test_size). Raises ValueError when
    more rows are asked for than the difficulty has distinct questions, or (when that number is not known) when
    sampling stops finding new questions. `progress=None` shows a tqdm bar from PROGRESS_THRESHOLD rows up.
    """
    task = _resolve(task)
    check_difficulty(difficulty)
    sizes = {"test": _check_size("test_size", test_size), "train": _check_size("train_size", train_size)}
    if "{question}" not in prompt_template:
        raise ValueError(f"prompt_template must contain '{{question}}', got {prompt_template!r}")
    total = sum(sizes.values())
    available = task.count_problems(difficulty)
    if available is not None and total > available:
        raise ValueError(
            f"{task.name} at difficulty {difficulty} has only {available} distinct problems, but "
            f"train_size + test_size = {total}; ask for fewer rows or raise the difficulty"
        )
    rng = random.Random(f"skyrl-gym/synthetic/{task.name}/{difficulty}/{seed}")
    seen: set[str] = set()
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    stall_limit = max(10_000, 50 * total)
    show = total >= PROGRESS_THRESHOLD if progress is None else progress
    bar = _progress_bar(total, f"{task.name} d{difficulty}") if show else None
    try:
        for split, size in sizes.items():
            misses = 0
            while len(splits[split]) < size:
                problem = task.make_problem(rng, difficulty)
                if problem["question"] in seen:
                    misses += 1
                    if misses > stall_limit:
                        raise ValueError(
                            f"{task.name} at difficulty {difficulty}: found only {len(seen)} distinct problems after "
                            f"{misses} draws without a new one, but {total} were asked for; ask for fewer rows or "
                            "raise the difficulty"
                        )
                    continue
                misses = 0
                seen.add(problem["question"])
                rows = splits[split]
                rows.append(
                    make_row(
                        task,
                        problem,
                        difficulty=difficulty,
                        index=len(rows),
                        split=split,
                        prompt_template=prompt_template,
                    )
                )
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return splits


def _progress_bar(total: int, label: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=f"generating {label}", unit="row", file=sys.stderr)


def arrow_schema(task: Union[str, SyntheticTask], difficulty: int = 1) -> Any:
    """The pyarrow schema of a family's rows; the ground truth type is inferred from one generated problem."""
    import pyarrow as pa

    task = _resolve(task)
    sample = task.make_problem(random.Random(0), check_difficulty(difficulty))["ground_truth"]
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    extra_info = pa.struct(
        [
            ("difficulty", pa.int64()),
            ("index", pa.int64()),
            ("split", pa.string()),
            ("question", pa.string()),
            ("answer", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(message)),
            ("env_class", pa.string()),
            ("reward_spec", pa.struct([("method", pa.string()), ("ground_truth", pa.array([sample]).type)])),
            ("extra_info", extra_info),
        ]
    )


def write_rows(rows: list[dict[str, Any]], path: Union[str, Path], schema: Any = None) -> Path:
    """Write rows to `path`: parquet (pyarrow, with `schema` if given) for `.parquet`, else one JSON object a line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    else:
        with path.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def read_rows(path: Union[str, Path]) -> list[dict[str, Any]]:
    """Read rows written by `write_rows` back as plain Python dicts and lists."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_dataset(
    out_dir: Union[str, Path],
    task: Union[str, SyntheticTask],
    *,
    train_size: int,
    test_size: int,
    difficulty: int,
    seed: int,
    fmt: str = "parquet",
    prompt_template: str = "{question}",
    progress: Optional[bool] = None,
) -> dict[str, Path]:
    """Generate the splits (see `generate_splits`) and write `out_dir/train.<fmt>` and `out_dir/test.<fmt>`."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    task = _resolve(task)
    splits = generate_splits(
        task,
        train_size=train_size,
        test_size=test_size,
        difficulty=difficulty,
        seed=seed,
        prompt_template=prompt_template,
        progress=progress,
    )
    schema = arrow_schema(task, difficulty) if fmt == "parquet" else None
    return {name: write_rows(rows, Path(out_dir) / f"{name}.{fmt}", schema) for name, rows in splits.items()}


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser of `python -m skyrl_gym.envs.synthetic.generate`."""
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_gym.envs.synthetic.generate",
        description="Write train/test datasets of a synthetic task family (no overlap between the splits).",
    )
    parser.add_argument("--task", required=True, choices=sorted(TASKS), help="task family (also the env id)")
    parser.add_argument("--train-size", type=int, required=True, help="number of training rows")
    parser.add_argument("--test-size", type=int, required=True, help="number of test rows")
    parser.add_argument("--difficulty", type=int, default=1, help=f"1 (easiest) to {MAX_DIFFICULTY}; default 1")
    parser.add_argument("--seed", type=int, default=0, help="random seed; default 0")
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    parser.add_argument("--format", choices=FORMATS, default="parquet", help="file format; default parquet")
    parser.add_argument(
        "--prompt-template", default="{question}", help="user message template with {question}; default the question"
    )
    parser.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI; returns the exit status (2 with a message on bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    split_args = {
        key: getattr(args, key) for key in ("train_size", "test_size", "difficulty", "seed", "prompt_template")
    }
    try:
        paths = write_dataset(
            args.out, args.task, fmt=args.format, progress=False if args.no_progress else None, **split_args
        )
    except ValueError as exc:
        parser.error(str(exc))
    print(
        f"wrote {args.train_size} train and {args.test_size} test rows of synthetic/{args.task} "
        f"(difficulty {args.difficulty}, seed {args.seed}): {paths['train']} {paths['test']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
