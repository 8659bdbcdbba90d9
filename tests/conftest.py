"""Shared fixtures: one real local Ray (2 CPUs, like CI) for the whole session, and a local
multi-node Ray cluster for the tests that need one."""

from __future__ import annotations

import types

import faulty_envs  # noqa: F401 - registers the test/<Name>-v0 environments
import pytest
import ray

LOCAL_RAY = dict(num_cpus=2, include_dashboard=False, logging_level="ERROR")

# No idle worker processes started ahead on every node: jaxflow's actors each want their
# own (a runtime env), so those would only take CPU from a 2-core machine. (A removed node
# is known dead at once: Cluster.remove_node stops its raylet with SIGTERM, and the raylet
# tells the GCS; Ray's health checks, which find a node that vanished, are left as they are.)
CLUSTER_SYSTEM_CONFIG = {"prestart_worker_first_driver": False, "enable_worker_prestart": False}


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
    it. Yields ``cluster`` (the ``Cluster``, to add or remove nodes) and the node handles
    ``head``, ``a`` and ``b`` (each with its ``.node_id``)."""
    from ray.cluster_utils import Cluster

    had_local = ray.is_initialized()
    ray.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(num_cpus=1, include_dashboard=False, _system_config=CLUSTER_SYSTEM_CONFIG),
    )
    try:
        nodes = {
            name: cluster.add_node(num_cpus=2, resources={f"node_{name}": 1, "rollout": 2, "replay": 2})
            for name in "ab"
        }
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR")
        yield types.SimpleNamespace(cluster=cluster, head=cluster.head_node, **nodes)
    finally:
        ray.shutdown()
        cluster.shutdown()
        if had_local:
            ray.init(**LOCAL_RAY)
