"""Convert GSM8K into SkyRL prompt rows (env `gsm8k`) and write them as parquet.

    python examples/gsm8k/gsm8k_dataset.py --input gsm8k_sample.jsonl --output-dir ~/data/gsm8k [--split train]
    python examples/gsm8k/gsm8k_dataset.py --from-hf-cache --output-dir ~/data/gsm8k [--split test]

The input is the original GSM8K format, one `{"question", "answer"}` object a line (jsonl) or a parquet file with
those columns, where the answer's last line is "#### <number>". `--from-hf-cache` reads `openai/gsm8k` (config
`main`) from the Hugging Face datasets cache, offline: it never downloads. Each row becomes
`{data_source, prompt, env_class: "gsm8k", reward_spec: {method: "rule", ground_truth}, extra_info}` (or
`env_class: "gsm8k_multi_turn"` with `--env-class`, several attempts with feedback) with the
number after "####" as ground truth (thousands separators dropped) and the original answer kept in `extra_info`.
Rows that cannot be converted are reported with their line (jsonl) or row (parquet) number and skipped, or stop the
run with `--strict`. This folder ships `gsm8k_sample.jsonl`, twenty GSM8K-style problems written for this example.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Optional

from skyrl_gym.rewards.numbers import normalize_number
from skyrl_train.dataset import validate_row

DATA_SOURCE = "openai/gsm8k"
ENV_CLASS = "gsm8k"
ENV_CLASSES = ("gsm8k", "gsm8k_multi_turn")
"""The envs that score GSM8K rows: one answer, or several attempts with feedback (`--env-class`)."""
HF_DATASET = ("openai/gsm8k", "main")
SPLITS = ("train", "test")
INSTRUCTION = 'Work it out step by step, then give the final answer as a number on the last line, as "#### <answer>".'
SAMPLE_FILE = Path(__file__).resolve().parent / "gsm8k_sample.jsonl"


class GSM8KSourceError(RuntimeError):
    """The GSM8K source cannot be read (missing file, unknown format, `datasets` absent or data not cached)."""


class BadRow(NamedTuple):
    """A source row that could not be converted: where it is (e.g. "line 7") and why."""

    location: str
    problem: str


def final_answer(answer: Any) -> str:
    """The number after the last "####" of a GSM8K answer, normalised ("#### 1,234" -> "1234"); ValueError if none."""
    if not isinstance(answer, str):
        raise ValueError(f"'answer' must be a string, got {type(answer).__name__}")
    if "####" not in answer:
        raise ValueError("'answer' has no final '#### <number>' line")
    written = answer.rsplit("####", 1)[1].strip()
    number = normalize_number(written)
    if number is None:
        raise ValueError(f"'answer' ends with '#### {written}', which is not a number")
    return number


def make_row(question: Any, answer: Any, *, split: str, index: int, env_class: str = ENV_CLASS) -> dict[str, Any]:
    """One SkyRL row for a GSM8K problem; ValueError naming the field when the problem is malformed."""
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"'question' must be a non-empty string, got {question!r}")
    ground_truth = final_answer(answer)
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question.strip()}\n\n{INSTRUCTION}"}],
        "env_class": env_class,
        "reward_spec": {"method": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, "question": question, "answer": answer},
    }


def read_jsonl_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(location, record) for every non-blank line; a line that is not JSON yields a BadRow as its record."""
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield f"line {line_number}", json.loads(line)
            except json.JSONDecodeError as exc:
                yield f"line {line_number}", BadRow(f"line {line_number}", f"not valid JSON ({exc.msg})")


def read_parquet_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(location, record) for every row of a parquet file, numbered from 0."""
    import pyarrow.parquet as pq

    for row_index, record in enumerate(pq.read_table(path).to_pylist()):
        yield f"row {row_index}", record


RECORD_READERS = {".jsonl": read_jsonl_records, ".parquet": read_parquet_records}


def read_local_records(path: Path) -> list[tuple[str, Any]]:
    """All records of a local GSM8K file, picked by extension (GSM8KSourceError when missing or unsupported)."""
    if not path.is_file():
        raise GSM8KSourceError(f"--input {path}: no such file")
    if path.suffix.lower() not in RECORD_READERS:
        raise GSM8KSourceError(f"--input {path}: expected a {' or '.join(RECORD_READERS)} file")
    return list(RECORD_READERS[path.suffix.lower()](path))


def read_hf_cache_records(split: str) -> list[tuple[str, Any]]:
    """Records of `openai/gsm8k` (config `main`) from the local HF datasets cache, with the hub switched off."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # read before `datasets` is imported: a cache miss fails instead of downloading
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    try:
        import datasets
    except ImportError as exc:
        raise GSM8KSourceError(
            "--from-hf-cache needs the `datasets` package, which is not installed; pass --input with a local "
            "GSM8K jsonl or parquet file instead (this script never downloads)"
        ) from exc
    name, config = HF_DATASET
    try:
        data = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # datasets raises several types for a cache miss in offline mode
        raise GSM8KSourceError(
            f"GSM8K ({name!r}, config {config!r}, split {split!r}) is not in the Hugging Face datasets cache, and "
            f"this script never downloads ({type(exc).__name__}: {exc}); pass --input with a local file instead"
        ) from exc
    return [(f"row {row_index}", record) for row_index, record in enumerate(data)]


def convert_records(
    records: Sequence[tuple[str, Any]], split: str, env_class: str = ENV_CLASS
) -> tuple[list[dict[str, Any]], list[BadRow]]:
    """Convert source records into checked SkyRL rows; returns (rows, bad rows).

    `extra_info.index` is the record's position in the source (0-based, bad records counted), so it matches the row
    index of the HF split or the order of the jsonl records.
    """
    rows: list[dict[str, Any]] = []
    bad: list[BadRow] = []
    for index, (location, record) in enumerate(records):
        if isinstance(record, BadRow):
            bad.append(record)
            continue
        try:
            if not isinstance(record, dict):
                raise ValueError(f"expected an object with 'question' and 'answer', got {type(record).__name__}")
            row = make_row(record.get("question"), record.get("answer"), split=split, index=index, env_class=env_class)
            rows.append(validate_row(row, source=f"converted {split} rows", index=len(rows)))
        except ValueError as exc:
            bad.append(BadRow(location, str(exc)))
    return rows, bad


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write the rows as a parquet file (directories created)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description="Convert GSM8K into SkyRL prompt rows (parquet).")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", type=Path, help="local GSM8K file: .jsonl or .parquet with question/answer")
    source.add_argument("--from-hf-cache", action="store_true", help="read openai/gsm8k from the HF cache (offline)")
    parser.add_argument("--output-dir", type=Path, required=True, help="writes <output-dir>/<split>.parquet")
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default=None,
        help="split name of the rows; default 'train' with --input, both splits with --from-hf-cache",
    )
    parser.add_argument("--strict", action="store_true", help="stop (and write nothing) if any row is bad")
    parser.add_argument(
        "--env-class", choices=ENV_CLASSES, default=ENV_CLASS, help="the env of the rows; default gsm8k (one answer)"
    )
    return parser


def convert_split(
    records: Sequence[tuple[str, Any]], split: str, output_dir: Path, strict: bool, env_class: str = ENV_CLASS
) -> int:
    """Convert and write one split; reports bad rows on stderr. Returns the exit status (0 ok, 1 nothing written)."""
    rows, bad = convert_records(records, split, env_class)
    for location, problem in bad:
        print(f"{split}: skipping {location}: {problem}", file=sys.stderr)
    if bad and strict:
        print(f"{split}: {len(bad)} bad row(s) and --strict given; nothing written", file=sys.stderr)
        return 1
    if not rows:
        print(f"{split}: no convertible rows; nothing written", file=sys.stderr)
        return 1
    path = write_parquet(rows, output_dir.expanduser() / f"{split}.parquet")
    print(f"wrote {len(rows)} {split} rows to {path}" + (f" (skipped {len(bad)} bad rows)" if bad else ""))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        if args.input is not None:
            sources = {args.split or "train": read_local_records(args.input.expanduser())}
        else:
            splits = [args.split] if args.split else list(SPLITS)
            sources = {split: read_hf_cache_records(split) for split in splits}
    except GSM8KSourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    statuses = [
        convert_split(records, split, args.output_dir, args.strict, args.env_class)
        for split, records in sources.items()
    ]
    return max(statuses)


if __name__ == "__main__":
    sys.exit(main())
