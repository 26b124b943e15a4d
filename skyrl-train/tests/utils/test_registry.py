"""The generic `Registry`: duplicate and invalid names, overwriting, and the export/import round trip of user entries."""

import pytest

from skyrl_train.utils.registry import Registry, RegistryError


def test_duplicate_name_is_an_error_naming_the_first_owner():
    registry = Registry("widget", '@register_widget("name")')

    @registry.register("spin")
    def first():
        return 1

    with pytest.raises(RegistryError, match=r"widget 'spin' is already registered \(by .*first\)"):
        registry.add("spin", lambda: 2)
    assert registry.get("spin") is first


def test_overwrite_replaces_and_empty_name_is_rejected():
    registry = Registry("widget", "@w")
    registry.add("spin", lambda: 1)
    registry.add("spin", lambda: 2, overwrite=True)
    assert registry.get("spin")() == 2
    with pytest.raises(RegistryError, match="non-empty string"):
        registry.add("  ", lambda: 3)
    with pytest.raises(RegistryError, match="expected a callable"):
        registry.add("x", 42)


def test_export_import_round_trip_into_another_registry_of_the_same_kind():
    source = Registry("gadget", "@g")
    source.add("builtin_one", lambda: "b", builtin=True)
    source.add("user_one", lambda x: x + 1)
    target = Registry("gadget", "@g")
    assert target.import_entries(source.export_entries()) == ["user_one"]
    assert target.get("user_one")(41) == 42
    assert "builtin_one" not in target
    with pytest.raises(RegistryError, match="this registry is for 'other'"):
        Registry("other", "@o").import_entries(source.export_entries())
    with pytest.raises(RegistryError, match="expected the bytes"):
        target.import_entries("not bytes")
