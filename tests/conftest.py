"""Shared fixtures: one real local Ray (2 CPUs, like CI) for the whole session."""

from __future__ import annotations

import faulty_envs  # noqa: F401 - registers the test/<Name>-v0 environments
import pytest
import ray


@pytest.fixture(scope="session")
def ray_local():
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()
