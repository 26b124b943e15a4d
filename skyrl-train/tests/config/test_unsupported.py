"""`NOT_YET_SUPPORTED`: each entry's refused value is refused by name when a config is built, its default works, and
the reference docs list it."""

from pathlib import Path

import pytest

from skyrl_train.config import ConfigValidationError, SkyRLConfig
from skyrl_train.config.unsupported import NOT_YET_SUPPORTED

DOCS = Path(__file__).resolve().parents[3] / "docs" / "reference" / "configuration.md"


def getattr_path(cfg: object, key: str) -> object:
    value = cfg
    for name in key.split("."):
        value = getattr(value, name)
    return value


@pytest.mark.parametrize("entry", NOT_YET_SUPPORTED, ids=lambda entry: entry.key)
def test_each_not_yet_supported_value_is_refused_by_name(entry):
    section, _, name = entry.key.rpartition(".")
    data: dict = {}
    node = data
    for part in section.split("."):
        node = node.setdefault(part, {})
    node[name] = entry.refused_example
    with pytest.raises(ConfigValidationError) as info:
        SkyRLConfig.from_dict(data)
    assert any(p.startswith(f"{entry.key}=") and "is not supported here yet" in p for p in info.value.problems)
    assert getattr_path(SkyRLConfig(), entry.key) in entry.accepted  # the default works today


def test_the_reference_docs_list_every_not_yet_supported_key():
    text = DOCS.read_text()
    section = text.split("## Not supported yet", 1)[1].split("\n## ", 1)[0]
    for entry in NOT_YET_SUPPORTED:
        assert f"| `{entry.key}` |" in section, entry.key
