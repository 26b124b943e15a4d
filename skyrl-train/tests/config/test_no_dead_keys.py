"""No dead config keys: every leaf of `SkyRLConfig` is either shown to change behaviour by named tests, or listed as
not supported yet (refused by validation, shown in the docs); and every NovaSky-AI/SkyRL spelling this project
accepts (`config/upstream_keys.py`) lands on such a key.

`key_evidence.yaml` maps a key (or an fnmatch pattern of keys) to the tests that fail when the code ignores it.
NOT_YET_SUPPORTED lives in `skyrl_train.config.unsupported`. The file's `pending` section holds keys whose code is
being changed on other branches; their owners' tests fill it in at merge, and it must then be empty.
"""

import ast
import fnmatch
from functools import cache
from pathlib import Path

import pytest

from skyrl_train.config.upstream_keys import RULES, VALUE_RULES
from skyrl_train.config.upstream_rules import Rename, Replace

TESTS = Path(__file__).resolve().parents[1]


@cache
def _test_functions(relative: str) -> set[str]:
    path = TESTS / relative
    if not path.is_file():
        return set()
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_leaf_key_has_evidence_or_is_not_yet_supported(key_homes):
    orphans, ambiguous = [], []
    for key in key_homes.leaves:
        # several evidence patterns may add tests to one key; the three kinds of home exclude each other
        kinds = [
            any(fnmatch.fnmatchcase(key, pattern) for pattern in key_homes.evidence),
            any(fnmatch.fnmatchcase(key, pattern) for pattern in key_homes.pending),
            key in key_homes.unsupported,
        ]
        if not any(kinds):
            orphans.append(key)
        elif sum(kinds) > 1:
            ambiguous.append(key)
    assert not orphans, f"keys with neither a behavioural test nor a 'not supported yet' entry: {orphans}"
    assert not ambiguous, f"keys both evidenced and pending or not supported: {ambiguous}"
    assert len(key_homes.leaves) > 150  # the walk really reached the leaves


def test_every_entry_names_real_keys_and_real_tests(key_homes):
    keys = list(key_homes.leaves)
    for table in (key_homes.evidence, key_homes.pending):
        stale = [pattern for pattern in table if not fnmatch.filter(keys, pattern)]
        assert not stale, f"patterns that match no config key: {stale}"
    missing = []
    for pattern, tests in key_homes.evidence.items():
        assert tests, f"{pattern}: no test named"
        for test in tests:
            relative, _, function = test.partition("::")
            if function not in _test_functions(relative):
                missing.append(f"{pattern}: {test}")
    assert not missing, f"evidence naming tests that do not exist: {missing}"
    assert key_homes.unsupported <= set(keys)


_ALIASES = {key: rule for key, rule in RULES.items() if isinstance(rule, Rename)}


@pytest.mark.parametrize("upstream", list(_ALIASES))
def test_every_upstream_alias_lands_on_keys_the_code_reads(upstream, key_homes):
    rule = _ALIASES[upstream]
    targets = [*rule.targets, *(key for key, _ in rule.implies)]
    for target in targets:
        if target in RULES:  # a legacy spelling of a current-layout key, which has its own rule
            continue
        leaves = key_homes.leaves_under(target)
        assert leaves, f"{upstream} -> {target}: no such config key"
        orphans = [leaf for leaf in leaves if not key_homes.homed(leaf)]
        assert not orphans, f"{upstream} -> {target}: keys nothing reads or refuses: {orphans}"


def test_every_translated_value_lands_on_a_key_the_code_reads(key_homes):
    for key, rules in VALUE_RULES.items():
        for _, rule in rules:
            if isinstance(rule, Replace):
                assert all(key_homes.homed(leaf) for leaf in key_homes.leaves_under(key)), key
