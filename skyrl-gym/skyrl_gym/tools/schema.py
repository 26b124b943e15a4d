"""Derive a tool's JSON schema from a Python signature, its type hints and its docstring."""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

from skyrl_gym.errors import ToolError

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def type_to_schema(hint: Any, where: str) -> dict[str, Any]:
    """Translate one type hint to a JSON schema fragment; `where` names the parameter in errors."""
    if hint is inspect.Parameter.empty or hint is Any:
        return {}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [member.value for member in hint]}
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        options = [type_to_schema(arg, where) for arg in args if arg is not type(None)]
        nullable = type(None) in args
        if len(options) == 1 and not nullable:
            return options[0]
        if nullable:
            options.append({"type": "null"})
        return {"anyOf": options}
    if hint in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, typing.Sequence):
        schema: dict[str, Any] = {"type": "array"}
        if args and not (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
            if origin is tuple:
                schema["prefixItems"] = [type_to_schema(arg, where) for arg in args]
                schema["minItems"] = schema["maxItems"] = len(args)
            else:
                schema["items"] = type_to_schema(args[0], where)
        elif args:
            schema["items"] = type_to_schema(args[0], where)
        return schema
    if hint is dict or origin is dict:
        schema = {"type": "object"}
        if args and args[1] is not Any:
            schema["additionalProperties"] = type_to_schema(args[1], where)
        return schema
    raise ToolError(f"{where}: type hint {hint!r} has no JSON schema; use str, int, float, bool, list, dict or Literal")


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SECTION = re.compile(r"^\s*(Returns|Raises|Yields|Examples?|Notes?)\s*:\s*$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {parameter: description})."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    current: str | None = None
    in_args = False
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args, current = True, None
            continue
        if _SECTION.match(line):
            in_args, current = False, None
            continue
        if in_args:
            match = _ARG_LINE.match(line)
            if match and (len(line) - len(line.lstrip())) <= 4:
                current = match.group(1).lstrip("*")
                params[current] = match.group(3).strip()
            elif current and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
        elif not params:
            description.append(line)
    return "\n".join(description).strip(), params


def function_schema(fn: Callable[..., Any], name: str, skip_first: bool) -> tuple[str, dict[str, Any]]:
    """Return (description, JSON schema of the parameters) for `fn`; `skip_first` drops `self`."""
    description, param_docs = parse_docstring(fn.__doc__)
    if not description:
        raise ToolError(f"tool '{name}' needs a docstring: its first paragraph becomes the tool's description")
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # unresolved forward references
        raise ToolError(f"tool '{name}': could not resolve type hints ({exc})") from exc
    properties: dict[str, Any] = {}
    required: list[str] = []
    params = list(signature.parameters.values())[1 if skip_first else 0 :]
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolError(f"tool '{name}': *args/**kwargs cannot be described by a JSON schema")
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolError(f"tool '{name}': parameter '{param.name}' is positional-only; tools are called by keyword")
        prop = type_to_schema(hints.get(param.name, inspect.Parameter.empty), f"tool '{name}' parameter '{param.name}'")
        if param.name in param_docs:
            prop["description"] = param_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif param.default is None or isinstance(param.default, (str, int, float, bool, list, dict)):
            prop["default"] = param.default
        properties[param.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return description, schema
