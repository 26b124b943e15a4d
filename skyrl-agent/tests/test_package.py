"""The skyrl-agent distribution installs and reports the version its metadata declares."""

from importlib.metadata import version

import skyrl_agent


def test_version_matches_distribution_metadata():
    assert skyrl_agent.__version__ == version("skyrl-agent")
