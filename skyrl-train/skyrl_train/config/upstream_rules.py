"""The kinds of rule that say what one of NovaSky-AI/SkyRL's config keys or values is in this project.

Upstream SkyRL has two config layouts: the legacy one (Hydra YAML, `python -m skyrl_train.entrypoints.main_base`,
flat generator keys such as `generator.backend`) and the current one (dataclasses, `python -m
skyrl.train.entrypoints.main_base`, nested keys such as `generator.inference_engine.run_engines_locally`). Every key
of either layout that this project does not spell the same way has one rule (`upstream_keys.RULES`; a rule on a
section covers the keys under it that have no rule of their own):

- `Rename`: the key is this project's `target` key(s), or for a section, the section `target`; `values` maps upstream
  values spelled differently (`NOTHING`: the value sets nothing here), `implies` adds what the key switches on.
- `Fixed`: the key selects behaviour this project always has at the `accepted` values (accepted and dropped:
  nothing stores them); any other value asks for `feature`, refused as not supported here.
- `Ignored`: a setting of a feature whose on-switch is refused here (profiler ranks, MTP loss weight, ...): upstream
  ignores it while the feature is off, and so does this project.
- `Checked`: the value is checked against the built config.
- `Remote`: part of upstream's "engines run elsewhere" switch, translated as a whole (`upstream.py`).

`Replace` and `Refuse` do the same for upstream values of keys spelled alike (`upstream_keys.VALUE_RULES`).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Optional

NOTHING: Any = type("Nothing", (), {"__repr__": lambda self: "NOTHING"})()
"""A mapped value that sets nothing here (e.g. `use_tis=false`: the off-policy keys decide)."""


@dataclass(frozen=True)
class Rename:
    """An upstream key that is `target` here (a tuple: several keys here, e.g. one per role)."""

    target: str | tuple[str, ...]
    values: tuple[tuple[Any, Any], ...] = ()
    """`(upstream value, value here)` pairs for values spelled differently."""
    implies: tuple[tuple[str, Any], ...] = ()
    """Further `(key, value)` settings the upstream key means (e.g. `enabled=true` for a DAPO buffer length)."""

    @property
    def targets(self) -> tuple[str, ...]:
        """The target keys as a tuple."""
        return (self.target,) if isinstance(self.target, str) else self.target


@dataclass(frozen=True)
class Fixed:
    """An upstream key whose `accepted` values describe what this project always does; any other value asks for
    `feature`, which is not supported here."""

    accepted: tuple[Any, ...]
    feature: str
    """What other values ask for, named in the refusal."""
    means: str
    """What the accepted values are here (shown by `--dry-run`)."""
    instead: str = ""
    """What does that job here, if anything."""


@dataclass(frozen=True)
class Ignored:
    """A setting of `feature`, which is off here (its switch, `switch`, is refused unless off): ignored as upstream
    ignores it while the feature is off."""

    feature: str
    switch: str


@dataclass(frozen=True)
class Checked:
    """An upstream key whose value is checked against the built config: `feature(cfg, value)` is None when the value
    describes what this project does there, else the feature the value asks for (refused)."""

    feature: Callable[[Any, Any], Optional[str]]
    means: str


@dataclass(frozen=True)
class Remote:
    """One part of upstream's switch to inference servers started elsewhere."""

    part: Literal["locally", "urls", "proxy"]


@dataclass(frozen=True)
class Replace:
    """An upstream value of a key spelled alike, spelled `value` here."""

    value: Any
    note: str = ""


@dataclass(frozen=True)
class Refuse:
    """An upstream value of a key spelled alike that asks for a feature not supported here."""

    feature: str
    instead: str = ""


Rule = Rename | Fixed | Ignored | Checked | Remote

OFF = (False,)
"""The accepted values of a switch that stays off here."""

NONE = (None,)
"""The accepted values of a setting left unset here."""
