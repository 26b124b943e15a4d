"""Translates NovaSky-AI/SkyRL's config keys and values into this project's, when a config is built.

Both ways of building a config go through here: overrides (`SkyRLConfig.from_cli_overrides`, the command line) with
`translate_overrides`, and nested dicts (`from_dict`, YAML files) with `translate_mapping`. Each upstream key is
resolved by its rule (`upstream_rules`) in `upstream_keys.RULES` into this project's canonical key, so nothing is stored twice:
`trainer.policy.optimizer_config.lr=1e-6` becomes `trainer.policy.optimizer.lr=1e-6`, `trainer.resume_mode=null`
becomes `trainer.resume_mode=none`. Keys of features this project lacks are refused naming the feature.

The result, a `Translation`, carries the canonical overrides, what was translated (`--dry-run` prints it, notes are
said once at start-up), every problem found (all of them, so one run shows every unknown key and bad value), and
whether the input spoke SkyRL's dialect at all (`upstream_meanings` then warns where a shared key means something
else here).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skyrl_train.config.errors import ConfigError, ConfigTypeError, UnknownConfigKeyError, UnsupportedFeatureError
from skyrl_train.config.overrides import Override, find_key, resolve_key
from skyrl_train.config.typecheck import convert_value, is_config_class, is_free_mapping
from skyrl_train.config.upstream_keys import ENGINE, LEGACY_ONLY_PREFIXES, PLUS_ADDED, RULES, VALUE_RULES
from skyrl_train.config.upstream_rules import NOTHING, Checked, Fixed, Ignored, Refuse, Remote, Rename, Rule

if TYPE_CHECKING:
    from skyrl_train.config.root import SkyRLConfig


@dataclass(frozen=True)
class Applied:
    """One upstream key or value that was translated: the override as given, what it became here (empty when it was
    accepted as what this project always does), and a note to say about it."""

    given: str
    became: tuple[str, ...]
    note: str = ""
    announce: bool = False
    """Say the note once at start-up (a value that runs something else than its name suggests)."""

    def describe(self) -> str:
        """One line for `--dry-run`: `given -> became: note`."""
        target = ", ".join(self.became) if self.became else "accepted, nothing to set"
        return f"{self.given} -> {target}" + (f": {self.note}" if self.note else "")


@dataclass
class Translation:
    """Canonical overrides for a list of (possibly upstream) overrides, with what was translated and what is wrong."""

    overrides: list[Override] = field(default_factory=list)
    applied: list[Applied] = field(default_factory=list)
    problems: list[ConfigError] = field(default_factory=list)
    deferred: list[Callable[[SkyRLConfig], str | None]] = field(default_factory=list)
    """Checks of translated keys that need the whole built config (their message names the upstream key)."""
    legacy: bool = False
    """A key only upstream's legacy layout has was given."""
    upstream_module: bool = False
    """The run was started through one of upstream's module paths (`skyrl.train...`, `examples...`)."""

    @property
    def speaks_skyrl(self) -> bool:
        """True when the input used any upstream key, value or module path."""
        return bool(self.applied) or self.legacy or self.upstream_module

    @property
    def notes(self) -> list[str]:
        """The distinct notes of the translated keys, in order (said once at start-up)."""
        seen: list[str] = []
        for applied in self.applied:
            note = f"{applied.given}: {applied.note}"
            if applied.announce and note not in seen:
                seen.append(note)
        return seen

    def raise_problems(self) -> None:
        """Raise one error listing every problem (the problem itself when there is one)."""
        raise_all(self.problems)

    def check_built(self, cfg: SkyRLConfig) -> list[str]:
        """The deferred checks' problems for the built config."""
        return [problem for check in self.deferred if (problem := check(cfg)) is not None]

    def describe(self) -> str:
        """The translated keys as comment lines for `--dry-run` (empty when nothing was translated)."""
        if not self.applied:
            return ""
        lines = ["# SkyRL keys and values translated to this project's (see docs/migrating-from-skyrl.md):"]
        lines += [f"#   {applied.describe()}" for applied in self.applied]
        return "\n".join(lines) + "\n"


def raise_all(problems: Sequence[ConfigError]) -> None:
    """Raise nothing for no problem, the problem itself for one, else one error of their common type listing all."""
    if not problems:
        return
    if len(problems) == 1:
        raise problems[0]
    kinds = {type(problem) for problem in problems}
    kind = kinds.pop() if len(kinds) == 1 else ConfigError
    lines = "\n".join(f"  - {problem}" for problem in problems)
    raise kind(f"{len(problems)} problems in the config:\n{lines}")


def same_value(a: Any, b: Any) -> bool:
    """Equality that keeps `True` apart from `1` and `None` apart from `0` (numbers compare across int and float)."""
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return a == b
    return type(a) is type(b) and a == b


def _lookup(pairs: Sequence[tuple[Any, Any]], value: Any) -> Any:
    for given, mapped in pairs:
        if same_value(given, value):
            return mapped
    return _MISSING


_MISSING = object()


def hydra_value(value: Any) -> str:
    """`value` written in Hydra's override grammar (`null`, `true`, `'text'`, `[a,b]`, `{k: v}`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        return f"'{escaped}'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{hydra_value(str(k))}: {hydra_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} as an override value")


def _value_text(override: Override) -> str:
    return override.text.split("=", 1)[1] if "=" in override.text else ""


def _rules_for(key: str) -> tuple[str, Rule] | None:
    """The rule of `key`, or of its closest section that has one, with the key it was found at."""
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in RULES:
            return candidate, RULES[candidate]
    return None


def _known(schema: type, key: str) -> tuple[Any, bool] | None:
    return find_key(schema, key)


def _is_section(annotation: Any) -> bool:
    from skyrl_train.config.overrides import _strip_optional

    return is_config_class(_strip_optional(annotation))


class _Translator:
    """Walks the overrides once; keeps the state the `Remote` switch needs until the end."""

    def __init__(self, schema: type) -> None:
        self.schema = schema
        self.result = Translation()
        self.remote: dict[str, tuple[Override, Any]] = {}
        self.given_keys: set[str] = set()

    # ----- emitting
    def emit(self, key: str, value: Any, source: Override, *, same_text: bool) -> Override:
        """A canonical override of `key` (writing the source's value text when the value is unchanged)."""
        action = "delete" if source.action == "delete" else "set"
        if action == "delete":
            text = f"~{key}"
        else:
            text = f"{key}={_value_text(source) if same_text else hydra_value(value)}"
        override = Override(key=key, value=value, action=action, text=text)
        self.result.overrides.append(override)
        self.given_keys.add(key)
        return override

    def problem(self, error: ConfigError) -> None:
        self.result.problems.append(error)

    def applied(self, source: Override, became: Sequence[Override], note: str = "", announce: bool = False) -> None:
        self.result.applied.append(Applied(source.text, tuple(o.text for o in became), note, announce))

    # ----- the walk
    def translate(self, override: Override) -> None:
        """Translate one override (and what a dict value holds) into canonical overrides or problems."""
        key = override.key
        if any(key == p or key.startswith(p) for p in LEGACY_ONLY_PREFIXES):
            self.result.legacy = True
        known = _known(self.schema, key)
        if known is not None:
            self.canonical(key, override.value, override, known, via_rule=False)
            return
        found = _rules_for(key)
        if found is not None:
            at, rule = found
            if at == key or not isinstance(rule, Rename):
                self.apply_rule(at, rule, override)
                return
            remainder = key[len(at) :]
            self.renamed(rule.targets[0] + remainder, override.value, override)
            return
        if isinstance(override.value, Mapping) and override.action != "delete":
            self.flatten(override)
            return
        self.problem(self.unknown(key))

    def flatten(self, override: Override) -> None:
        """A dict given for an upstream section: translate each of its keys."""
        for name, value in override.value.items():
            key = f"{override.key}.{name}"
            self.translate(Override(key=key, value=value, action="set", text=f"{key}={hydra_value(value)}"))

    def canonical(
        self, key: str, value: Any, source: Override, known: tuple[Any, bool], via_rule: bool, same_text: bool = True
    ) -> str:
        """A key this project has: map upstream values of it, and accept `+key` on a key that exists. Called for a
        rule's target (`via_rule`), it records nothing itself and returns the note for its caller to record."""
        annotation, free = known
        if source.action == "delete":
            self.emit(key, None, source, same_text=True)
            return ""
        if isinstance(value, Mapping) and _is_section(annotation) and self._holds_upstream_keys(key, value):
            self.flatten(Override(key=key, value=value, action="set", text=source.text))
            return ""
        for given, rule in VALUE_RULES.get(key, ()):
            if not same_value(given, value):
                continue
            if isinstance(rule, Refuse):
                self.problem(_unsupported(source.text, rule.feature, rule.instead))
            elif rule.value is NOTHING:
                self.applied(source, (), "SkyRL's default, the same here")
            else:
                made = self.emit(key, rule.value, source, same_text=False)
                if via_rule:
                    return rule.note
                self.applied(source, (made,), rule.note, announce=bool(rule.note))
            return ""
        if source.action == "add" and not free and not via_rule:
            if not key.startswith(PLUS_ADDED):
                self.problem(
                    ConfigError(
                        f"override {source.text!r}: '{key}' already exists; use '{key}=...' to change it"
                        f" or '++{key}=...' to add or change"
                    )
                )
                return ""
            made = self.emit(key, value, source, same_text=same_text)
            self.applied(source, (made,), "SkyRL's legacy config lacked this key; it exists here, so it is set")
            return ""
        self.emit(key, value, source, same_text=same_text)
        return ""

    def _holds_upstream_keys(self, key: str, value: Mapping) -> bool:
        return any(_known(self.schema, f"{key}.{name}") is None for name in value)

    def renamed(self, key: str, value: Any, source: Override) -> None:
        """A key under a renamed section: its canonical key must exist here."""
        known = _known(self.schema, key)
        if known is None:
            self.problem(self.unknown(source.key, renamed_to=key))
            return
        start = len(self.result.overrides)
        note = self.canonical(key, value, source, known, via_rule=True)
        made = self.result.overrides[start:]
        if made:
            self.applied(source, made, note, announce=bool(note))

    def apply_rule(self, at: str, rule: Rule, source: Override) -> None:
        value = source.value
        if isinstance(rule, Remote):
            self.remote[rule.part] = (source, value)
            return
        if isinstance(rule, Checked):
            self.result.deferred.append(lambda cfg: _checked(rule, source, cfg))
            self.applied(source, (), rule.means)
            return
        if isinstance(rule, Ignored):
            self.applied(source, (), f"{rule.feature} is off here ({rule.switch} is refused), so this is ignored")
            return
        if isinstance(rule, Fixed):
            if any(same_value(accepted, value) for accepted in rule.accepted):
                self.applied(source, (), rule.means)
            elif isinstance(value, Mapping) and at == source.key and source.action != "delete":
                self.flatten(source)  # a section's dict: each of its keys has its own rule (or the section's)
            else:
                self.problem(_unsupported(source.text, rule.feature, rule.instead))
            return
        if isinstance(value, Mapping) and source.action != "delete" and at == source.key:
            self.flatten(source)
            return
        mapped = _lookup(rule.values, value)
        if mapped is NOTHING:
            self.applied(source, (), "sets nothing here")
            return
        target_value = value if mapped is _MISSING else mapped
        start = len(self.result.overrides)
        notes = []
        for target in rule.targets:
            known = _known(self.schema, target)
            if known is None and target in RULES:  # a legacy key whose current-layout name has its own rule
                self.translate(Override(key=target, value=target_value, action=source.action, text=source.text))
                continue
            if known is None:
                raise AssertionError(f"upstream rule {at!r} names {target!r}, which is not a config key")
            notes.append(
                self.canonical(target, target_value, source, known, via_rule=True, same_text=mapped is _MISSING)
            )
        for implied_key, implied_value in rule.implies:
            self.emit(implied_key, implied_value, source, same_text=False)
        made = self.result.overrides[start:]
        note = next((note for note in notes if note), "")
        if made:
            self.applied(source, made, note, announce=bool(note))

    def unknown(self, key: str, renamed_to: str | None = None) -> ConfigError:
        """The error for a key neither this project nor upstream has (with close matches)."""
        try:
            resolve_key(self.schema, renamed_to or key)
        except UnknownConfigKeyError as exc:
            if renamed_to is None:
                return exc
            return UnknownConfigKeyError(f"'{key}' is SkyRL's spelling of '{renamed_to}', and here: {exc}")
        return UnknownConfigKeyError(f"unknown config key '{key}'")

    # ----- the remote switch
    def finish_remote(self) -> None:
        """Upstream runs against servers started elsewhere when `run_engines_locally=false`: that is the `remote`
        backend here, one engine per server URL; the URLs mean nothing otherwise (the legacy layout always had a
        default list)."""
        locally = self.remote.get("locally")
        urls = self.remote.get("urls")
        proxy = self.remote.get("proxy")
        if locally is None or locally[1] is not False:
            if locally is not None and locally[1] is not True:
                self.problem(ConfigTypeError(f"'{locally[0].text}': expected true or false"))
                return
            if locally is not None:
                self.applied(locally[0], (), "this run starts its engines")
            for part in (urls, proxy):
                if part is not None and part[1] not in (None, []):
                    self.applied(part[0], (), "used by SkyRL only with run_engines_locally=false: ignored")
            return
        server_urls = [] if urls is None or urls[1] is None else urls[1]
        if isinstance(server_urls, str):
            server_urls = [server_urls]
        if not server_urls:
            what = "a router URL without the servers behind it" if proxy else "external servers without their URLs"
            self.problem(
                _unsupported(
                    locally[0].text,
                    what,
                    f"list the servers: {ENGINE}.external_server_urls=[http://host:port] (or"
                    f" {ENGINE}.backend=remote with {ENGINE}.remote_urls)",
                )
            )
            return
        normalized = [url if "://" in url else f"http://{url}" for url in map(str, server_urls)]
        made = [
            self.emit(f"{ENGINE}.backend", "remote", locally[0], same_text=False),
            self.emit(f"{ENGINE}.remote_urls", normalized, locally[0], same_text=False),
            self.emit(f"{ENGINE}.num_engines", len(normalized), locally[0], same_text=False),
        ]
        self.applied(locally[0], made, "the remote backend: one engine per server URL")
        if urls is not None:
            self.applied(urls[0], (), "the server URLs of the remote backend")
        if proxy is not None and proxy[1] is not None:
            self.applied(proxy[0], (), "requests go to the server URLs directly; this project spreads prompts itself")


def _checked(rule: Checked, source: Override, cfg: SkyRLConfig) -> str | None:
    feature = rule.feature(cfg, source.value)
    return None if feature is None else f"'{source.text}': {feature} is not supported here"


def _unsupported(given: str, feature: str, instead: str) -> UnsupportedFeatureError:
    message = f"'{given}': {feature} is not supported here" if feature else f"'{given}' is not supported here"
    return UnsupportedFeatureError(message + (f"; {instead}" if instead else ""))


def _check_types(schema: type, overrides: Sequence[Override], problems: list[ConfigError]) -> None:
    """Type-check each canonical override's value against its field (all of them, not only the first)."""
    for override in overrides:
        if override.action == "delete" or (isinstance(override.value, str) and "${" in override.value):
            continue
        annotation, free = resolve_key(schema, override.key)
        if free and not is_free_mapping(annotation):
            annotation = Any
        if is_config_class(annotation):
            continue  # a section's dict merges into its defaults; the build checks it
        try:
            convert_value(annotation, copy.deepcopy(override.value), override.key, schema)
        except ConfigError as exc:
            problems.append(exc)


def translate_overrides(
    overrides: Sequence[Override], schema: type | None = None, upstream_module: bool = False
) -> Translation:
    """Canonical overrides for `overrides` (see the module docstring); problems are collected, not raised."""
    if schema is None:
        from skyrl_train.config.root import SkyRLConfig

        schema = SkyRLConfig
    translator = _Translator(schema)
    translator.result.upstream_module = upstream_module
    for override in overrides:
        translator.translate(override)
    translator.finish_remote()
    from skyrl_train.config.upstream_meanings import add_implied_meanings

    add_implied_meanings(translator.result, translator.given_keys)
    _check_types(schema, translator.result.overrides, translator.result.problems)
    return translator.result


def flatten_mapping(data: Mapping[str, Any], schema: type, prefix: str = "") -> list[Override]:
    """Overrides setting every leaf of the nested `data` (a free-form mapping of this project is one leaf)."""
    flat: list[Override] = []
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        known = _known(schema, key)
        descend = isinstance(value, Mapping) and (
            (known is not None and not known[1]) or (known is None and key not in RULES)
        )
        if descend and value:
            flat.extend(flatten_mapping(value, schema, key))
        else:
            flat.append(Override(key=key, value=value, action="set", text=f"{key}={_text(value)}"))
    return flat


def _text(value: Any) -> str:
    try:
        return hydra_value(value)
    except TypeError:
        return repr(value)


def translate_mapping(data: Mapping[str, Any], schema: type) -> tuple[dict[str, Any], Translation]:
    """`data` (a nested config dict, maybe in upstream's layout) in this project's layout, with the translation.

    A dict holding only this project's keys comes back unchanged."""
    from skyrl_train.config.overrides import apply_overrides

    flat = flatten_mapping(data, schema)
    if all(_known(schema, o.key) is not None for o in flat):
        translation = Translation()
        _check_types(schema, flat, translation.problems)
        return dict(data), translation
    translation = translate_overrides(flat, schema)
    if translation.problems:
        return dict(data), translation
    return apply_overrides({}, translation.overrides, schema), translation
