"""Fixtures shared by the examples' tests."""

import pytest


@pytest.fixture
def own_ray():
    """The run starts a local Ray cluster unless one is up; shut down only a cluster this test started."""
    import ray

    started_here = not ray.is_initialized()
    yield
    if started_here and ray.is_initialized():
        ray.shutdown()
