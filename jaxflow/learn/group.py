"""A learner group: ``num_learners`` learner processes (Ray actors) that form one JAX
multi-process runtime and train as one :class:`~jaxflow.learn.learner.Learner`.

Each process holds a ``Learner`` over the mesh of all processes' devices: the train state
replicated, the batch sharded along its leading axis, each process placing its own rows.
Every update runs the same compiled ``sgd_update`` in all of them at once; XLA averages the
gradients across processes (gloo on the CPU), so the group's update equals the
single-process update on the concatenation of the processes' rows, in process order.
The group has the ``Learner``'s interface, so the plans' operators (``TrainOneStep``,
``BroadcastWeights``, ``UpdateTargetNetwork``), the learner thread of IMPALA, APPO and Ape-X,
and checkpoints use it unchanged. ``ToDevice`` in front of a group places each process's rows
in the object store ahead of the update (:meth:`LearnerGroup.place`), where the process
fetches them itself.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
import ray

from jaxflow.dataflow.jax_process import host, start_jax_processes
from jaxflow.dataflow.placement import Placement
from jaxflow.dataflow.stored_rows import (
    BATCHES_LOST,
    Piece,
    StoredRows,
    combine,
    fetch_rows,
    moments,
    pieces,
    standardized,
)
from jaxflow.learn.learner import Learner
from jaxflow.learn.sgd import TrainState
from jaxflow.learn.thread import LearnerThread
from jaxflow.rollout.batch import train_arrays


class GroupRows(NamedTuple):
    """A global batch already split for a group: each process's rows as an object in Ray's
    object store, which that process fetches from wherever it lies."""

    parts: tuple[ray.ObjectRef, ...]
    """Process ``i``'s rows ``{field: [n_i, ...]}``."""
    num_samples: int
    """Rows of all processes together."""


class GroupMember:
    """What each learner process hosts: a ``Learner`` over the global mesh, answering an
    update with its metrics and the version it reached."""

    def __init__(self, make_learner: Callable[..., Learner], process_id: int):
        del process_id  # every member is alike
        self.learner = make_learner(devices=jax.devices())
        self._fetched: dict[str, np.ndarray] | None = None

    def fetch(self, mine: list[Piece], fields: tuple[str, ...]) -> dict[str, tuple[int, float, float]] | None:
        """Fetches this process's stored rows for the next update; the sums of ``fields``
        (None: some rows are lost)."""
        self._fetched = fetch_rows(mine)
        return None if self._fetched is None else moments(self._fetched, fields)

    def update_fetched(self, stats: dict[str, tuple[float, float]]) -> tuple[dict[str, Any], int, int]:
        """:meth:`update` on the fetched rows, ``stats``' fields standardized by the global mean and std."""
        assert self._fetched is not None, "fetch comes first"
        rows, self._fetched = standardized(self._fetched, stats), None
        return self.update(rows)

    def update(self, batch: Mapping[str, np.ndarray]) -> tuple[dict[str, Any], int, int]:
        """This process's rows of one update; its metrics, the version and target updates reached."""
        return self.learner.update(batch), self.learner.version, self.learner.target_updates

    def warm_up(self, batch: Mapping[str, np.ndarray]) -> None:
        self.learner.warm_up(batch)

    def update_target(self, fraction: float) -> None:
        self.learner.update_target(fraction)

    def follow_target(self, target_update_period: int, tau: float) -> None:
        self.learner.follow_target(target_update_period, tau)

    def apply_gradients(self, grads: Any) -> None:
        self.learner.apply_gradients(grads)

    def get_weights(self) -> Any:
        return self.learner.get_weights()

    def get_state(self) -> TrainState:
        return self.learner.get_state()

    def set_state(self, state: TrainState) -> None:
        self.learner.set_state(state)


class LearnerGroup:
    """``num_learners`` learner processes training as one learner (see the module docstring).

    Example:
        >>> group = LearnerGroup(functools.partial(Learner, loss_fn, opt, params), 2, Placement(num_cpus=1))  # doctest: +SKIP
        >>> metrics = group.update(batch)  # rows [0, n/2) train in process 0, the rest in process 1  # doctest: +SKIP
    """

    def __init__(
        self,
        make_learner: Callable[..., Learner],
        num_learners: int,
        placement: Placement,
        env_vars: dict[str, str] | None = None,
    ):
        placement.check_room(num_learners, f"learners (num_learners={num_learners})")
        self.processes, self.local_devices = start_jax_processes(num_learners, placement.options(), env_vars)
        host(self.processes, functools.partial(GroupMember, make_learner))
        self._version = 0
        self.target_updates = 0
        """Target updates made by :meth:`follow_target`'s rule so far (the same in every process)."""
        self.thread: LearnerThread | None = None

    @property
    def num_devices(self) -> int:
        """Devices of all processes together."""
        return sum(self.local_devices)

    @property
    def version(self) -> int:
        """Optimizer steps so far (the same in every process)."""
        return self._version

    def shares(self, n: int) -> list[int]:
        """Each process's rows of a global batch of ``n``: in proportion to its devices."""
        if n % self.num_devices:
            raise ValueError(
                f"A batch of {n} samples cannot be split evenly over {self.num_devices} devices of "
                f"{len(self.processes)} learners; choose batch sizes divisible by the device count."
            )
        return [n // self.num_devices * d for d in self.local_devices]

    def split(self, batch: Mapping[str, Any]) -> list[dict[str, np.ndarray]]:
        """Each process's rows of a flat global batch: consecutive blocks in process order,
        in proportion to its devices."""
        bounds = np.cumsum([0] + self.shares(len(next(iter(batch.values())))))
        return [{k: np.asarray(v)[a:b] for k, v in batch.items()} for a, b in itertools.pairwise(bounds)]

    def _on_all(self, method: str, *per_process: Sequence[Any]) -> list[Any]:
        refs = [p.call.remote(method, *args) for p, *args in zip(self.processes, *per_process)]
        return ray.get(refs)

    def _broadcast(self, method: str, *args: Any) -> list[Any]:
        return self._on_all(method, *([a] * len(self.processes) for a in args))

    def place(self, batch: Mapping[str, Any]) -> GroupRows:
        """A flat global batch split and put in the object store, each process's rows apart
        (what ``ToDevice`` does ahead of a group's updates)."""
        return GroupRows(tuple(ray.put(rows) for rows in self.split(batch)), len(next(iter(batch.values()))))

    def update(self, batch: Mapping[str, Any] | GroupRows | StoredRows) -> dict[str, Any]:
        """One SGD update on a flat global batch (or one already placed, or rows the workers
        stored: each process fetches its own, then all update); returns the metrics as
        ``Learner.update`` does."""
        if isinstance(batch, StoredRows):
            parts = pieces(batch, self.shares(batch.num_rows))
            sums = self._on_all("fetch", parts, [batch.standardize] * len(parts))
            if any(s is None for s in sums):  # all skip it together; none waits in a collective
                return {BATCHES_LOST: 1.0}
            replies = self._broadcast("update_fetched", combine(sums))
        else:
            replies = self._on_all("update", batch.parts if isinstance(batch, GroupRows) else self.split(batch))
        (metrics, self._version, self.target_updates), *_ = replies
        return metrics

    def warm_up(self, batch: Mapping[str, np.ndarray]) -> None:
        self._on_all("warm_up", self.split(batch))

    def update_target(self, fraction: float = 1.0) -> None:
        self._broadcast("update_target", fraction)

    def follow_target(self, target_update_period: int, tau: float = 1.0) -> None:
        """Every process moves its target network by :meth:`Learner.follow_target`'s rule,
        inside the updates it falls due in."""
        self._broadcast("follow_target", target_update_period, tau)

    def apply_gradients(self, grads: Any) -> None:
        self._broadcast("apply_gradients", ray.put(grads))
        self._version += 1

    def get_weights(self) -> Any:
        """The parameters as numpy arrays (process 0's; every process holds the same)."""
        return ray.get(self.processes[0].call.remote("get_weights"))

    def get_state(self) -> TrainState:
        return ray.get(self.processes[0].call.remote("get_state"))

    def set_state(self, state: TrainState) -> None:
        self._broadcast("set_state", ray.put(state))
        self._version = int(state.step)

    def node_ids(self) -> list[str]:
        """The Ray node of each learner process."""
        return ray.get([p.node_id.remote() for p in self.processes])

    def start_thread(
        self,
        to_host_batch: Callable[[Any], Mapping[str, Any]] = train_arrays,
        inqueue_size: int = 8,
        outqueue_size: int = 8,
    ) -> LearnerThread:
        """Starts a :class:`LearnerThread` whose updates are the group's."""
        self._stop_thread()
        self.thread = LearnerThread(self, to_host_batch, inqueue_size, outqueue_size).start()  # type: ignore[arg-type]
        return self.thread

    def _stop_thread(self) -> None:
        if self.thread is not None:
            self.thread.stop()
            self.thread = None

    def stop(self) -> None:
        """Stops the learner thread, if any, and the learner processes."""
        self._stop_thread()
        for p in self.processes:
            ray.kill(p)
