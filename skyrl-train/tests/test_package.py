"""The skyrl-train distribution installs and reports the version its metadata declares."""

from importlib.metadata import version

import skyrl_train


def test_version_matches_distribution_metadata():
    assert skyrl_train.__version__ == version("skyrl-train")
