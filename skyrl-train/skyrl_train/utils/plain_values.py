"""Turn configs and metric values into plain JSON-ready Python values (for state files and tracking backends), and
back: a dataclass from a mapping of its fields."""

from __future__ import annotations

import dataclasses
import enum
import math
import os
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def to_jsonable(value: Any, where: str = "value") -> Any:
    """`value` as JSON-ready Python values.

    Dataclasses and mappings become dicts, tuples and sets lists, enums their value, paths strings, NumPy/torch
    scalars Python numbers. Raises TypeError naming the key path (`where`) of anything else.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): to_jsonable(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value, where)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if getattr(value, "shape", None) == () and callable(getattr(value, "item", None)):  # numpy / torch scalars
        return value.item()
    raise TypeError(f"{where} has type {type(value).__name__}, which is not a plain (JSON) value")


def flatten(value: Any, prefix: str = "", separator: str = ".") -> dict[str, Any]:
    """Nested mappings as one level: `{"a": {"b": 1}}` -> `{"a.b": 1}` (lists are kept as leaf values)."""
    plain = to_jsonable(value, prefix or "value")
    if not isinstance(plain, dict):
        return {prefix: plain}
    flat: dict[str, Any] = {}
    for key, item in plain.items():
        name = f"{prefix}{separator}{key}" if prefix else key
        if isinstance(item, dict) and item:
            flat.update(flatten(item, name, separator))
        else:
            flat[name] = item
    return flat


def as_scalar(value: Any) -> float | None:
    """`value` as a finite-or-not float when it is a single number (bool, int, float, 0-d/1-element array or
    tensor), else None."""
    if isinstance(value, bool | int | float):
        return float(value)
    numel = value.numel() if callable(getattr(value, "numel", None)) else getattr(value, "size", None)
    if numel == 1 and callable(getattr(value, "item", None)):
        item = value.item()
        if isinstance(item, bool | int | float):
            return float(item)
    return None


def format_number(value: float) -> str:
    """A short human form: 4 significant digits, `nan`/`inf` spelled out."""
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value + 0.0:.4g}"  # + 0.0 turns -0.0 into 0.0


def dataclass_from_mapping(cls: type[T], values: Mapping[str, Any], what: str) -> T:
    """Build dataclass `cls` from a mapping of its field names; unknown keys raise ValueError naming them and `what`."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"unknown {what} keys {sorted(unknown)}; expected some of {sorted(known)}")
    return cls(**dict(values))
