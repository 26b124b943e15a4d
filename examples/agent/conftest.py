"""Make the example's own modules importable in its tests, as they are when a user runs them from this folder, and
give its tests one model cache (the briefly warm-started agent model is built once for all of them)."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def agent_cache(tmp_path_factory):
    """$SKYRL_CACHE for the example's tests (restored afterwards)."""
    path = tmp_path_factory.mktemp("agent_cache")
    previous = os.environ.get("SKYRL_CACHE")
    os.environ["SKYRL_CACHE"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("SKYRL_CACHE", None)
    else:
        os.environ["SKYRL_CACHE"] = previous
