"""Builds the typed config dataclasses from plain data, checking every value against its field's annotation.

Supported annotations: `bool`, `int`, `float` (an int is accepted and widened), `str`, `None`, `Any`, `Literal[...]`,
unions (`X | None`, `str | list[str]`), `list[X]`, `dict[str, X]` and nested config dataclasses. Errors name the full
key path (`trainer.policy.optimizer.lr`), the expected type and the given value.
"""

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Literal, Union, get_args, get_origin

from skyrl_train.config.errors import ConfigTypeError, UnknownConfigKeyError

_MISMATCH = object()  # sentinel: the value does not fit the annotation


def join_path(prefix: str, name: str) -> str:
    """Join a dotted key path and one more key: `join_path("trainer", "seed") == "trainer.seed"`."""
    return f"{prefix}.{name}" if prefix else name


def is_config_class(annotation: Any) -> bool:
    """True when `annotation` is a config dataclass (a section with named fields)."""
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def is_free_mapping(annotation: Any) -> bool:
    """True when `annotation` is a free-form mapping (`dict[...]` or `Any`) whose keys are not fixed by the schema."""
    return annotation is Any or get_origin(annotation) is dict or annotation is dict


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotation of each init field of the config dataclass `cls`, in declaration order."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def iter_fields(cls: type, prefix: str = "") -> Iterator[tuple[str, type, str, Any]]:
    """Yield `(path, owner_class, field_name, annotation)` for every field under `cls`, depth first, with sections."""
    for name, annotation in field_types(cls).items():
        path = join_path(prefix, name)
        yield path, cls, name, annotation
        if is_config_class(annotation):
            yield from iter_fields(annotation, path)


def describe_type(annotation: Any) -> str:
    """A short human description of an annotation, e.g. `int`, `str | null`, `one of 'fsdp2', 'megatron'`."""
    if annotation is Any:
        return "any value"
    if annotation is type(None):
        return "null"
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(choice) for choice in args)
    if origin in (Union, types.UnionType):
        return " | ".join(describe_type(arg) for arg in args)
    if origin is list:
        return f"list[{describe_type(args[0])}]" if args else "list"
    if origin is dict:
        return f"dict[{describe_type(args[0])}, {describe_type(args[1])}]" if args else "dict"
    if is_config_class(annotation):
        return f"a mapping of {annotation.__name__} fields"
    return getattr(annotation, "__name__", repr(annotation))


def describe_value(value: Any) -> str:
    """A short description of a given value with its type, e.g. `str 'abc'` or `null`."""
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > 120:
        text = text[:117] + "..."
    return f"{type(value).__name__} {text}"


def convert_value(annotation: Any, value: Any, path: str, root: type | None = None) -> Any:
    """Return `value` checked against `annotation` (ints widened to float, tuples to lists).

    Raises `ConfigTypeError` naming `path`, the expected type and the value; nested sections raise with deeper paths.
    """
    result = _convert(annotation, value, path, root)
    if result is _MISMATCH:
        hint = _mismatch_detail(annotation, value, path, root)
        if _plain_type_of(annotation) is str and isinstance(value, (int, float, bool)):
            hint = f" (quote it to pass a string: {path}='{value}')"
        raise ConfigTypeError(
            f"wrong type for '{path}': expected {describe_type(annotation)}, got {describe_value(value)}{hint}"
        )
    return result


def _mismatch_detail(annotation: Any, value: Any, path: str, root: type | None) -> str:
    """Point at the first bad item of a list or mapping, e.g. ` (item [1] is str 'foo', expected int)`."""
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    for member in members:
        origin, args = get_origin(member), get_args(member)
        if origin is list and args and isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                if _convert(args[0], item, path, root) is _MISMATCH:
                    return f" (item [{index}] is {describe_value(item)}, expected {describe_type(args[0])})"
        if origin is dict and len(args) == 2 and isinstance(value, Mapping):
            for key, item in value.items():
                if _convert(args[0], key, path, root) is _MISMATCH:
                    return f" (key {describe_value(key)} is not {describe_type(args[0])})"
                if _convert(args[1], item, path, root) is _MISMATCH:
                    return f" (value of key {key!r} is {describe_value(item)}, expected {describe_type(args[1])})"
    return ""


def _plain_type_of(annotation: Any) -> Any:
    """The non-None member of `X | None`, else the annotation itself."""
    args = [arg for arg in get_args(annotation) if arg is not type(None)]
    if get_origin(annotation) in (Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def _convert_scalar(annotation: type, value: Any) -> Any:
    if annotation is bool:
        return value if isinstance(value, bool) else _MISMATCH
    if annotation is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _MISMATCH
    if annotation is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok else _MISMATCH
    return value if isinstance(value, annotation) else _MISMATCH


def _convert(annotation: Any, value: Any, path: str, root: type | None) -> Any:
    if annotation is Any:
        return value
    if annotation is type(None):
        return None if value is None else _MISMATCH
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Literal:
        return value if any(type(value) is type(choice) and value == choice for choice in args) else _MISMATCH
    if origin in (Union, types.UnionType):
        for member in args:
            converted = _convert(member, value, path, root)
            if converted is not _MISMATCH:
                return converted
        return _MISMATCH
    if origin is list or annotation is list:
        if not isinstance(value, (list, tuple)):
            return _MISMATCH
        item_type = args[0] if args else Any
        items = [_convert(item_type, item, path, root) for item in value]
        return _MISMATCH if any(item is _MISMATCH for item in items) else items
    if origin is dict or annotation is dict:
        if not isinstance(value, Mapping):
            return _MISMATCH
        key_type, item_type = args if args else (Any, Any)
        converted = {_convert(key_type, k, path, root): _convert(item_type, v, path, root) for k, v in value.items()}
        bad = any(k is _MISMATCH or v is _MISMATCH for k, v in converted.items())
        return _MISMATCH if bad else converted
    if is_config_class(annotation):
        if not isinstance(value, Mapping):
            return _MISMATCH
        return build_dataclass(annotation, value, path, root)
    if isinstance(annotation, type):
        return _convert_scalar(annotation, value)
    raise TypeError(f"config field '{path}' has an unsupported annotation {annotation!r}")


def build_dataclass(cls: type, data: Mapping[str, Any], path: str = "", root: type | None = None) -> Any:
    """Build the config dataclass `cls` from `data`; missing keys take their defaults, unknown keys are rejected.

    `path` is the dotted path of `cls` inside the whole config (for messages) and `root` the top-level class (to
    suggest where a misplaced key really lives).
    """
    root = root or cls
    if not isinstance(data, Mapping):
        where = f"'{path}'" if path else "the config"
        raise ConfigTypeError(f"wrong type for {where}: expected {describe_type(cls)}, got {describe_value(data)}")
    annotations = field_types(cls)
    for key in data:
        if key not in annotations:
            raise unknown_key_error(cls, path, key, root)
    kwargs = {
        name: convert_value(annotations[name], value, join_path(path, name), root) for name, value in data.items()
    }
    return cls(**kwargs)


KEYS_NAMED_DIFFERENTLY = {
    "generator.type": "generator.workflow (a registered rollout workflow, e.g. generator.workflow=skyrl_agent)",
}
"""Keys that other frameworks (or older docs) use, mapped to the key that does that job here."""


def unknown_key_error(cls: type, path: str, key: Any, root: type | None = None) -> UnknownConfigKeyError:
    """The error for key `key` that section `cls` (at `path`) lacks, with close matches and where else it lives."""
    names = list(field_types(cls))
    full_path = join_path(path, str(key))
    if full_path in KEYS_NAMED_DIFFERENTLY:
        return UnknownConfigKeyError(
            f"unknown config key '{full_path}': here that job is done by {KEYS_NAMED_DIFFERENTLY[full_path]}."
        )
    suggestions = [join_path(path, name) for name in difflib.get_close_matches(str(key), names, n=3, cutoff=0.6)]
    if not suggestions and root is not None:  # a key put in the wrong section: point to where it lives
        everywhere = list(iter_fields(root))
        near = set(difflib.get_close_matches(str(key), {name for _p, _o, name, _a in everywhere}, n=3, cutoff=0.8))
        suggestions = [p for p, _owner, name, _ann in everywhere if name in near][:4]
    section = f"section '{path}' ({cls.__name__})" if path else f"the top level ({cls.__name__})"
    message = f"unknown config key '{full_path}': {section} has no field '{key}'."
    if suggestions:
        message += " Did you mean " + " or ".join(f"'{s}'" for s in suggestions) + "?"
    else:
        message += " Valid keys here: " + ", ".join(names) + "."
    return UnknownConfigKeyError(message)


def to_plain_dict(instance: Any) -> dict[str, Any]:
    """A deep plain-dict copy of a config dataclass (nested sections become dicts, lists are copied)."""
    return dataclasses.asdict(instance)
