"""Ray actors that together form one JAX multi-process runtime (``jax.distributed``): each
is one JAX process owning its local devices, and a compiled function over a mesh of all
their devices runs in all of them at once, its collectives crossing processes (on the CPU
through gloo). A :class:`JaxProcess` hosts one object built inside it (a learner, a worker
that also learns) and runs its methods.

``jax.distributed.initialize`` must run before anything else in the process touches JAX,
and importing jaxflow's RL modules does (gymnax builds arrays at import). So this module
imports no JAX at the top, each actor gets a process of its own (a runtime env no other
actor shares: Ray reuses processes only within one), and the hosted object is sent as
cloudpickled bytes, unpickled only after the runtime is up.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import ray

from jaxflow.dataflow.actors import jax_actor

CPU_COLLECTIVES = "gloo"
"""The collectives library of JAX's CPU backend across processes."""


class JaxProcess:
    """One process of a JAX multi-process runtime, as a Ray actor; see :func:`start_jax_processes`.

    Example:
        >>> procs, _ = start_jax_processes(2, dict(num_cpus=1))  # doctest: +SKIP
        >>> host(procs, lambda i: MyLearner())                 # doctest: +SKIP
        >>> ray.get([p.call.remote("update", rows) for p, rows in zip(procs, parts)])  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.obj: Any = None

    def address(self) -> str:
        """``ip:port`` of a free port on this actor's node, for the coordinator (process 0)."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return f"{ray.util.get_node_ip_address()}:{port}"

    def initialize(self, coordinator: str, num_processes: int, process_id: int) -> tuple[int, int]:
        """Joins the runtime (blocks until all ``num_processes`` have); returns this
        process's index and its number of local devices."""
        import jax

        jax.config.update("jax_cpu_collectives_implementation", CPU_COLLECTIVES)
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)
        return jax.process_index(), jax.local_device_count()

    def build(self, factory: bytes, process_id: int) -> None:
        """Builds the hosted object: ``factory`` is a cloudpickled ``factory(process_id)``."""
        self.obj = ray.cloudpickle.loads(factory)(process_id)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The hosted object's ``method`` (top-level ``ObjectRef`` arguments arrive resolved:
        Ray moves their data from wherever it lies straight to this process)."""
        return getattr(self.obj, method)(*args, **kwargs)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


def start_jax_processes(
    count: int, options: dict[str, Any], env_vars: dict[str, str] | None = None
) -> tuple[list[Any], list[int]]:
    """``count`` :class:`JaxProcess` actors placed with ``options`` (``Placement.options()``),
    joined into one JAX runtime, process ``i`` being the ``i``-th actor; and each one's
    number of local devices. ``env_vars`` are set in their processes (e.g. ``XLA_FLAGS``
    forcing several CPU devices each)."""
    token = uuid.uuid4().hex  # a runtime env of their own: fresh processes, never a reused one
    env = dict(env_vars or {}, JAXFLOW_JAX_RUNTIME=token)
    procs = [jax_actor(JaxProcess, env_vars=env, max_restarts=0, **options).remote() for _ in range(count)]
    coordinator = ray.get(procs[0].address.remote())
    joined = ray.get([p.initialize.remote(coordinator, count, i) for i, p in enumerate(procs)])
    assert [index for index, _ in joined] == list(range(count)), joined
    return procs, [devices for _, devices in joined]


def host(procs: Sequence[Any], factory: Callable[[int], Any]) -> None:
    """Builds ``factory(i)`` in process ``i`` (each its own object, all built at once: a
    constructor that places arrays on the global mesh meets the others there)."""
    payload = ray.put(ray.cloudpickle.dumps(factory))
    ray.get([p.build.remote(payload, i) for i, p in enumerate(procs)])
