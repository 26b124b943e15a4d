"""Shared by the config tests: where each config key is shown to do something (`key_evidence.yaml`), as the
`key_homes` fixture."""

import fnmatch
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.typecheck import is_free_mapping, iter_fields
from skyrl_train.config.unsupported import NOT_YET_SUPPORTED

EVIDENCE_FILE = Path(__file__).with_name("key_evidence.yaml")


def leaf_keys() -> list[str]:
    """Every leaf key of `SkyRLConfig().to_dict()`; a free-form mapping (env_configs, ...) is one leaf."""
    free = {path for path, _, _, annotation in iter_fields(SkyRLConfig) if is_free_mapping(annotation)}

    def walk(data: dict, prefix: str):
        for name, value in data.items():
            path = f"{prefix}.{name}" if prefix else name
            if isinstance(value, dict) and path not in free:
                yield from walk(value, path)
            else:
                yield path

    return list(walk(SkyRLConfig().to_dict(), ""))


def matches(patterns, key: str) -> list[str]:
    """The fnmatch `patterns` that `key` matches."""
    return [pattern for pattern in patterns if fnmatch.fnmatchcase(key, pattern)]


@dataclass(frozen=True)
class KeyHomes:
    """Each config key's home: behavioural tests (`evidence`: pattern -> tests), tests planned on unmerged branches
    (`pending`), or a `NOT_YET_SUPPORTED` entry (`unsupported`); `leaves` are the config's leaf keys."""

    evidence: dict[str, tuple[str, ...]]
    pending: dict[str, tuple[str, ...]]
    unsupported: frozenset[str]
    leaves: tuple[str, ...]

    def homed(self, key: str) -> bool:
        """True when some test shows `key` does something, or it is refused as not supported yet."""
        return bool(matches(self.evidence, key)) or bool(matches(self.pending, key)) or key in self.unsupported

    def leaves_under(self, key: str) -> list[str]:
        """The leaf keys at or under `key`, or the free-form mapping leaf that holds it."""
        under = [leaf for leaf in self.leaves if leaf == key or leaf.startswith(f"{key}.")]
        return under or [leaf for leaf in self.leaves if key.startswith(f"{leaf}.")]


@pytest.fixture(scope="session")
def key_homes() -> KeyHomes:
    """`key_evidence.yaml` with the config's leaf keys and its not-yet-supported entries."""
    data = yaml.safe_load(EVIDENCE_FILE.read_text())
    return KeyHomes(
        evidence={key: tuple(tests or ()) for key, tests in data["evidence"].items()},
        pending={key: tuple(tests or ()) for key, tests in (data["pending"] or {}).items()},
        unsupported=frozenset(entry.key for entry in NOT_YET_SUPPORTED),
        leaves=tuple(leaf_keys()),
    )
