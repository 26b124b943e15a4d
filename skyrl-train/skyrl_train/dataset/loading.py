"""Read dataset files (parquet, jsonl, json) from local paths or fsspec URLs into plain Python rows.

Every reader returns a list of dicts holding only Python types (str, int, float, bool, None, list, dict), so an env
gets the same values whether its rows came from jsonl or from a parquet file read by pyarrow (or a frame built by
pandas, whose numpy arrays and scalars are converted). The reader is picked by the file extension through the
`READERS` registry; `register_reader` adds one.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any, Union

import fsspec
import numpy as np

DataPath = Union[str, "os.PathLike[str]"]
"""A local path (`~` allowed) or an fsspec URL."""

RowReader = Callable[[IO[bytes], str], list[Any]]
"""A reader takes an open binary file and its name (for error messages) and returns the file's rows."""

READERS: dict[str, RowReader] = {}
"""File extension (with its dot, lower case) -> reader."""


class DatasetFileError(ValueError):
    """A dataset file cannot be read: unknown extension, malformed content, or no file given."""


def register_reader(extension: str) -> Callable[[RowReader], RowReader]:
    """Decorator registering a reader for files ending in `extension` (e.g. ".csv")."""
    if not extension.startswith("."):
        raise ValueError(f"extension must start with a dot, e.g. '.csv'; got {extension!r}")

    def decorate(reader: RowReader) -> RowReader:
        READERS[extension.lower()] = reader
        return reader

    return decorate


def to_python(value: Any) -> Any:
    """Convert numpy arrays/scalars (recursively, inside dicts and lists too) into Python lists and scalars.

    Tuples become lists, as JSON would make them. Other values are returned unchanged.
    """
    if isinstance(value, dict):
        return {key: to_python(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_python(item) for item in value]
    if isinstance(value, np.ndarray):
        return [to_python(item) for item in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


@register_reader(".parquet")
def read_parquet(handle: IO[bytes], source: str) -> list[Any]:
    """Rows of a parquet file, read with pyarrow (struct columns become dicts, list columns lists)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(handle)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise DatasetFileError(f"{source}: not a readable parquet file ({exc})") from exc
    return table.to_pylist()


def _parse_json_lines(text: str, source: str) -> list[Any]:
    rows = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DatasetFileError(f"{source}, line {line_number}: not valid JSON ({exc.msg})") from exc
    return rows


@register_reader(".jsonl")
def read_jsonl(handle: IO[bytes], source: str) -> list[Any]:
    """Rows of a JSON Lines file: one JSON object a line; blank lines are skipped."""
    return _parse_json_lines(_decode(handle, source), source)


@register_reader(".json")
def read_json(handle: IO[bytes], source: str) -> list[Any]:
    """Rows of a JSON file holding a list of objects; a `.json` file written as JSON Lines is read as such."""
    text = _decode(handle, source)
    try:
        content = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise DatasetFileError(f"{source}, line {exc.lineno}: not valid JSON ({exc.msg})") from exc
        return _parse_json_lines(text, source)  # several top-level values: JSON Lines under a .json name
    if isinstance(content, dict):
        # one object alone is a one-row JSON Lines file
        return [content]
    if not isinstance(content, list):
        raise DatasetFileError(f"{source}: expected a JSON list of row objects, got a {type(content).__name__}")
    return content


def _decode(handle: IO[bytes], source: str) -> str:
    try:
        return io.TextIOWrapper(handle, encoding="utf-8").read()
    except UnicodeDecodeError as exc:
        raise DatasetFileError(f"{source}: not UTF-8 text ({exc})") from exc


def file_extension(path: str) -> str:
    """The lower-case extension of a path or URL, ignoring any `?query` or `#fragment` of a URL."""
    name = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    return os.path.splitext(name)[1].lower()


def reader_for(path: str) -> RowReader:
    """The registered reader of `path`'s extension; DatasetFileError listing the supported ones otherwise."""
    extension = file_extension(path)
    if extension not in READERS:
        raise DatasetFileError(
            f"{path}: unsupported file extension {extension or '(none)'!r}; expected one of {sorted(READERS)}"
        )
    return READERS[extension]


def _localize(path: str) -> str:
    return path if "://" in path else os.path.expanduser(path)


def read_file(path: DataPath) -> list[Any]:
    """Read one file (local path, `~` path, or any fsspec URL such as `s3://`, `gs://`, `file://`, `memory://`).

    Rows pass through `to_python`, so a reader may return numpy values (as pandas-based readers do).
    """
    path = os.fspath(path)
    reader = reader_for(path)
    try:
        with fsspec.open(_localize(path), "rb") as handle:
            rows = reader(handle, path)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"dataset file not found: {path}") from exc
    return [to_python(row) for row in rows]


@dataclass
class LoadedFile:
    """The rows of one dataset file and where they came from."""

    path: str
    rows: list[Any]


def load_files(paths: Union[DataPath, Iterable[DataPath]]) -> list[LoadedFile]:
    """Read every file in `paths` (in order) with `read_file`; one path may be passed as a plain string."""
    path_list: Sequence[DataPath] = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not path_list:
        raise DatasetFileError("no dataset files given; expected at least one path or URL")
    return [LoadedFile(path=str(path), rows=read_file(str(path))) for path in path_list]
