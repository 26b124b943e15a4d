"""Make the example's own modules importable in its tests, as they are when a user runs them from this folder, and
give its tests one model cache (the briefly warm-started agent model is built once for all of them)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def agent_cache_dir(tmp_path_factory):
    """One model cache for the example's tests (the briefly warm-started agent model is built once)."""
    return tmp_path_factory.mktemp("agent_cache")


@pytest.fixture
def agent_cache(agent_cache_dir, monkeypatch):
    """$SKYRL_CACHE pointing at that cache for one test only (later tests must find the shared embedded models)."""
    monkeypatch.setenv("SKYRL_CACHE", str(agent_cache_dir))
    return agent_cache_dir
