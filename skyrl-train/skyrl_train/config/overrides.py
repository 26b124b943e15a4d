"""Parses `a.b.c=value` overrides with Hydra's own grammar and applies them to a plain config dict, checking keys.

Using Hydra's parser means `SkyRLConfig.from_cli_overrides` and the Hydra command line accept exactly the same
strings and read values the same way: `1` int, `1e-3` and `0.5` float, `true` bool, `null` None, `[a,b]` list,
`{k: v}` dict, `'quoted'` string. Forms:

- `a.b=value` sets a key (a dict value is merged into an existing section or mapping, anything else replaces);
- `+a.b=value` adds a key that does not exist yet, `++a.b=value` adds or sets;
- `~a.b` deletes a key: a field of a section goes back to its default, a key of a free-form mapping is removed.

Inside free-form mappings (such as `environment.env_configs`) `a.b=value` may also create new keys; the command line
rewrites those overrides to Hydra's `++` form so both paths behave alike.
"""

import copy
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from skyrl_train.config.errors import ConfigError, OverrideSyntaxError, UnknownConfigKeyError
from skyrl_train.config.typecheck import (
    describe_type,
    field_types,
    is_config_class,
    is_free_mapping,
    join_path,
    unknown_key_error,
)

OverrideAction = Literal["set", "add", "force_add", "delete"]

_QUOTE_HINT = "quote values with special characters, e.g. data.train_data=\"['~/data/train.parquet']\""


@dataclass(frozen=True)
class Override:
    """One parsed override: the dotted key, the parsed value, what to do, and the original text."""

    key: str
    value: Any
    action: OverrideAction
    text: str


def parse_override(text: str) -> Override:
    """Parse one override string with Hydra's grammar; raise `OverrideSyntaxError` saying what is wrong."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_override(text)
    except HydraException as exc:
        raise OverrideSyntaxError(f"cannot parse override {text!r}: {exc} ({_QUOTE_HINT})") from exc
    key = parsed.key_or_group
    if parsed.is_sweep_override():
        raise OverrideSyntaxError(
            f"override {text!r} has comma-separated values (a Hydra sweep): write a list as '{key}=[a,b]', or quote a"
            " string that contains commas"
        )
    if parsed.package is not None or "/" in key:
        raise OverrideSyntaxError(f"override {text!r} selects a config group; only 'a.b.c=value' keys are supported")
    if key == "hydra" or key.startswith("hydra."):
        raise OverrideSyntaxError(f"override {text!r} configures Hydra itself; it only applies on the command line")
    actions: dict[Any, OverrideAction] = {
        OverrideType.CHANGE: "set",
        OverrideType.ADD: "add",
        OverrideType.FORCE_ADD: "force_add",
        OverrideType.DEL: "delete",
    }
    return Override(key=key, value=parsed.value(), action=actions[parsed.type], text=text)


def parse_overrides(texts: Sequence[str]) -> list[Override]:
    """Parse a list of override strings (see `parse_override`)."""
    if isinstance(texts, str):
        raise OverrideSyntaxError(f"overrides must be a list of strings, got the single string {texts!r}")
    return [parse_override(text) for text in texts]


def _strip_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def find_key(schema: type, key: str) -> tuple[Any, bool] | None:
    """`resolve_key` without the error: None for a key no section has (cheap: no close matches are computed)."""
    annotation: Any = schema
    in_free_mapping = False
    for segment in key.split("."):
        container = _strip_optional(annotation)
        if is_free_mapping(container):
            in_free_mapping = True
            args = get_args(container)
            annotation = args[1] if len(args) == 2 else Any
        elif is_config_class(container) and segment in field_types(container):
            annotation = field_types(container)[segment]
        else:
            return None
    return annotation, in_free_mapping or is_free_mapping(_strip_optional(annotation))


def resolve_key(schema: type, key: str) -> tuple[Any, bool]:
    """Check that dotted `key` exists in `schema`; return its annotation and whether it is in a free-form mapping.

    Keys below a free-form mapping (`dict[...]` or `Any`) are not checked. Raises `UnknownConfigKeyError` with close
    matches for a key that no section has.
    """
    found = find_key(schema, key)
    if found is not None:
        return found
    annotation: Any = schema
    path = ""
    for segment in key.split("."):
        container = _strip_optional(annotation)
        if is_free_mapping(container):
            args = get_args(container)
            annotation = args[1] if len(args) == 2 else Any
        elif is_config_class(container):
            fields = field_types(container)
            if segment not in fields:
                raise unknown_key_error(container, path, segment, schema)
            annotation = fields[segment]
        else:
            raise UnknownConfigKeyError(
                f"unknown config key '{key}': '{path}' holds {describe_type(annotation)}, not a section with keys"
            )
        path = join_path(path, segment)
    raise AssertionError(f"find_key and resolve_key disagree on {key!r}")


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for name, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(name), dict):
            merged[name] = _deep_merge(merged[name], value)
        else:
            merged[name] = copy.deepcopy(value)
    return merged


def apply_override(data: dict[str, Any], override: Override, schema: type) -> None:
    """Apply one override to the plain config dict `data` in place, after checking its key against `schema`."""
    resolve_key(schema, override.key)
    *parents, leaf = override.key.split(".")
    node = data
    for depth, segment in enumerate(parents):
        child = node.get(segment)
        if child is None:
            child = node[segment] = {}
        if not isinstance(child, dict):
            where = ".".join(parents[: depth + 1])
            raise ConfigError(f"override {override.text!r}: '{where}' is {child!r}, not a mapping, so it has no keys")
        node = child
    exists = leaf in node
    if override.action == "delete":
        if not exists:
            raise ConfigError(f"override {override.text!r}: cannot delete '{override.key}', it is not set")
        if override.value is not None and node[leaf] != override.value:
            raise ConfigError(f"override {override.text!r}: '{override.key}' is {node[leaf]!r}, not {override.value!r}")
        del node[leaf]
        return
    if override.action == "add" and exists and not (isinstance(node[leaf], dict) and isinstance(override.value, dict)):
        raise ConfigError(
            f"override {override.text!r}: '{override.key}' already exists; use '{override.key}=...' to change it"
            f" or '++{override.key}=...' to add or change"
        )
    if isinstance(override.value, dict) and isinstance(node.get(leaf), dict):
        node[leaf] = _deep_merge(node[leaf], override.value)
    else:
        node[leaf] = copy.deepcopy(override.value)


def apply_overrides(data: dict[str, Any], overrides: Sequence[Override], schema: type) -> dict[str, Any]:
    """Return a deep copy of `data` with `overrides` applied in order (later ones win)."""
    result = copy.deepcopy(data)
    for override in overrides:
        apply_override(result, override, schema)
    return result


def resolve_interpolations(data: dict[str, Any]) -> dict[str, Any]:
    """Resolve OmegaConf interpolations such as `${trainer.seed}` the way Hydra does; plain values pass through."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(OmegaConf.create(data), resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise ConfigError(f"cannot resolve an interpolation in the config: {exc}") from exc


def to_hydra_override(override: Override, schema: type) -> str:
    """The override text to give Hydra: `a.b=v` inside a free-form mapping becomes `++a.b=v` (Hydra's struct mode
    would otherwise refuse new keys there); everything else is passed unchanged."""
    if override.action == "set" and resolve_key(schema, override.key)[1]:
        return "++" + override.text
    return override.text
