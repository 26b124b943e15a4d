"""The skyrl-tx distribution installs and reports the version its metadata declares."""

from importlib.metadata import version

import skyrl_tx


def test_version_matches_distribution_metadata():
    assert skyrl_tx.__version__ == version("skyrl-tx")
