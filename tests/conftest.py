"""Shared fixtures: one real local Ray (2 CPUs, like CI) for the whole session, and a local
multi-node Ray cluster for the tests that need one; one XLA compilation cache for the session.

Many tests build the same algorithm on the same env, and every build, every rollout worker and
every CLI subprocess compiles the same functions again. JAX's persistent compilation cache,
in a directory new to this session (so nothing compiled by an earlier run or another checkout
is reused), lets each of them load what an earlier one compiled. It is set through the
environment before JAX starts, so Ray's worker processes and the CLI's subprocesses share it;
its maximum size turns on JAX's file lock, so processes writing and reading at once never see
half an entry.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import types

XLA_CACHE_VARIABLE = "JAXFLOW_TESTS_XLA_CACHE"
"""Set by the pytest process that made the cache; its xdist workers, started after it read this
file, inherit it and use that cache rather than make their own."""

if XLA_CACHE_VARIABLE in os.environ:
    XLA_CACHE = os.environ[XLA_CACHE_VARIABLE]
else:
    XLA_CACHE = tempfile.mkdtemp(prefix="jaxflow-tests-xla-cache-")
    atexit.register(shutil.rmtree, XLA_CACHE, ignore_errors=True)
os.environ.update(
    JAXFLOW_TESTS_XLA_CACHE=XLA_CACHE,
    JAX_COMPILATION_CACHE_DIR=XLA_CACHE,
    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.1",  # the default (1 s) would skip most rollout functions
    JAX_COMPILATION_CACHE_MAX_SIZE=str(4 * 2**30),
    RAY_ADDRESS="local",  # until this process starts its Ray (start_local_ray): none found running
)
# One thread per process for OpenBLAS (numpy's, and SciPy's, whose LAPACK JAX calls on the CPU:
# a QR for every orthogonal initializer). The pytest processes, Ray's workers and the
# subprocesses, all started after this, share 2 cores, where more threads only spin against
# each other: a NatureCNN's eager init (a 3136 x 512 QR) took 6-8 s instead of 0.2 s under
# load. The results are the same bit for bit (checked: the conv torsos' and PPO's, SAC's and
# DQN's initial parameters, and their weights after three iterations).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import faulty_envs  # noqa: E402, F401 - registers the test/<Name>-v0 environments
import pytest  # noqa: E402
import ray  # noqa: E402

LOCAL_RAY = dict(num_cpus=2, include_dashboard=False, logging_level="ERROR")

# No idle worker processes started ahead on every node: jaxflow's actors each want their
# own (a runtime env), so those would only take CPU from a 2-core machine. (A removed node
# is known dead at once: Cluster.remove_node stops its raylet with SIGTERM, and the raylet
# tells the GCS; Ray's health checks, which find a node that vanished, are left as they are.)
CLUSTER_SYSTEM_CONFIG = {"prestart_worker_first_driver": False, "enable_worker_prestart": False}


def start_local_ray() -> None:
    """A new local Ray for this process, never one another pytest process started (Ray's
    ``ray.init()`` joins any Ray it finds running on the machine); then its subprocesses join
    this one."""
    os.environ["RAY_ADDRESS"] = "local"
    context = ray.init(**LOCAL_RAY)
    os.environ["RAY_ADDRESS"] = context.address_info["gcs_address"]


@pytest.fixture(scope="session")
def ray_local():
    if not ray.is_initialized():
        start_local_ray()
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
        os.environ["RAY_ADDRESS"] = cluster.address
        yield types.SimpleNamespace(cluster=cluster, head=cluster.head_node, **nodes)
    finally:
        ray.shutdown()
        cluster.shutdown()
        if had_local:
            start_local_ray()


def runs_first(item: pytest.Item) -> bool:
    """A learning test, one that checks a learning test's run (``shares_learning_run``: kept
    beside it, one process makes the run for both), or one on the multi-node cluster
    (``ray_cluster``, whose module's learning tests run first): kept next to those, its module's
    tests share one cluster, where split by the rest they would start and stop a second one
    (and the session's Ray again)."""
    ordered_first = ("learning", "shares_learning_run")
    if any(item.get_closest_marker(name) is not None for name in ordered_first):
        return True
    return "ray_cluster" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The learning tests (the longest) first, in their order, and the cluster's others with
    them (:func:`runs_first`), then the rest: pytest-xdist's two processes then share out
    short tests at the end, and neither waits alone on a long one."""
    items.sort(key=lambda item: not runs_first(item))
