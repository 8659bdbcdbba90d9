"""Shared fixtures: one real local Ray (2 CPUs, like CI) for the whole session, and a local
multi-node Ray cluster for the tests that need one."""

from __future__ import annotations

import types

import faulty_envs  # noqa: F401 - registers the test/<Name>-v0 environments
import pytest
import ray

LOCAL_RAY = dict(num_cpus=2, include_dashboard=False, logging_level="ERROR")

# Dead nodes are found in about a second rather than Ray's default 15 s or so, and no idle
# worker processes are started ahead: jaxflow's actors each want their own (a runtime env).
CLUSTER_SYSTEM_CONFIG = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 2,
    "prestart_worker_first_driver": False,
    "enable_worker_prestart": False,
}


@pytest.fixture(scope="session")
def ray_local():
    if not ray.is_initialized():
        ray.init(**LOCAL_RAY)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_cluster():
    """A head (1 CPU, where the driver runs) and two worker nodes ``a`` and ``b`` (2 CPUs
    each, and the custom resources ``rollout: 2`` and ``replay: 2``, plus ``node_a`` or
    ``node_b`` naming the node), in place of the session's local Ray, which comes back after
    it. Yields the ``Cluster`` with ``a`` and ``b`` (its node handles: ``.node_id``)."""
    from ray.cluster_utils import Cluster

    had_local = ray.is_initialized()
    ray.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(num_cpus=1, include_dashboard=False, _system_config=CLUSTER_SYSTEM_CONFIG),
    )
    nodes = {
        name: cluster.add_node(num_cpus=2, resources={f"node_{name}": 1, "rollout": 2, "replay": 2}) for name in "ab"
    }
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR")
    try:
        yield types.SimpleNamespace(cluster=cluster, head=cluster.head_node, **nodes)
    finally:
        ray.shutdown()
        cluster.shutdown()
        if had_local:
            ray.init(**LOCAL_RAY)
