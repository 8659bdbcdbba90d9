"""Device feeding: host batches become device batches on a background thread, a few
large prefetched transfers instead of many small blocking ones.

The learner's step is fast on an accelerator; what starves it is the host: building
a batch, then one ``device_put`` per array while the device sits idle. ``ToDevice``
moves that work off the learner's path. A thread pulls host batches from the plan,
stacks ``num_stack`` of them into one buffer per field, places each buffer with one
``jax.device_put`` already sharded for the learner's devices (leading batch axis over
the mesh), and keeps at most ``prefetch`` transfers ready, so the next batches are on
their way while the learner trains on the current one (double buffering with
``prefetch=2``). In front of a :class:`~jaxflow.learn.group.LearnerGroup` the same thread
splits each batch into the learner processes' rows and puts them in the object store, from
where each process fetches its own.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jaxflow.dataflow.errors import carrying
from jaxflow.dataflow.iterators import NOT_READY, LocalIterator
from jaxflow.dataflow.producer import Producer, ProducerError
from jaxflow.dataflow.stored_rows import StoredRows
from jaxflow.learn.group import GroupRows, LearnerGroup
from jaxflow.learn.learner import Learner
from jaxflow.rollout.batch import train_arrays

if TYPE_CHECKING:
    from jaxflow.replay.replayed import ReplaySource
    from jaxflow.rollout.batch import Batch


class DeviceBatch(NamedTuple):
    """A train batch already on the learner's devices, and what the host batch it was made
    from said of itself (a :class:`~jaxflow.rollout.batch.Batch` too)."""

    data: dict[str, jax.Array] | GroupRows | StoredRows
    """``{field: [N, ...]}``, sharded along ``N`` over the learner's devices (a learner
    group's: each process's rows in the object store)."""
    env_steps: int
    num_samples: int
    weights_version: int
    replay_source: ReplaySource | None
    """Where replayed items came from, for their priority updates."""

    def train_arrays(self) -> dict[str, jax.Array] | GroupRows | StoredRows:
        return self.data

    def replay_rows(self) -> Any:
        raise TypeError("a DeviceBatch is on the learner's devices; store the host batch it came from")

    @staticmethod
    def of(data: dict[str, jax.Array] | GroupRows | StoredRows, host: Batch) -> DeviceBatch:
        return DeviceBatch(data, host.env_steps, host.num_samples, host.weights_version, host.replay_source)


class ToDeviceError(RuntimeError):
    """The feeding thread failed; the original error is the cause, and its type this error's too
    (:func:`~jaxflow.dataflow.errors.carrying`: a worker's ``EnvValueError`` is caught as one)."""


def ToDevice(
    batches: LocalIterator[Any],
    learner: Learner | LearnerGroup,
    to_host: Callable[[Any], Mapping[str, np.ndarray]] = train_arrays,
    num_stack: int = 1,
    prefetch: int = 2,
) -> LocalIterator[DeviceBatch]:
    """Device batches from host ones (any :class:`~jaxflow.rollout.batch.Batch`), fed by a
    background thread.

    ``to_host`` makes the learner's arrays of a host batch (default: its ``train_arrays()``;
    IMPALA's learner takes batch-major sequences instead). ``num_stack`` consecutive host
    batches (same fields and shapes) become one transfer: one ``[num_stack, N, ...]``
    buffer per field, placed sharded along ``N``; the consumer then gets them back one by
    one, as on-device slices that stay on their shards. At most ``prefetch`` transfers wait,
    and one more is built, so the thread never runs further ahead than that. The plan's
    ``info["to_device"]`` gets bytes moved, transfers made and the seconds the consumer
    waited for data; an error in the thread (or upstream) is raised to the consumer as
    :class:`ToDeviceError` instead of leaving it waiting.

    Example:
        >>> batches = ParallelRollouts(workers).combine(ConcatBatches(4096))    # doctest: +SKIP
        >>> train = ToDevice(batches, learner).for_each(TrainOneStep(learner))  # doctest: +SKIP
    """
    if num_stack < 1 or prefetch < 1:
        raise ValueError(f"ToDevice: num_stack and prefetch must be >= 1, got {num_stack} and {prefetch}.")
    stats = {"bytes": 0, "transfers": 0, "batches": 0, "wait_s": 0.0}
    transfer = functools.partial(_transfer, learner, to_host, stats)
    # The stop flag is looked up at every check: Concurrently replaces it with the plan's own
    # after this is built, and a feeder bound to the old one never saw the plan stop.
    feeder: Producer[list[DeviceBatch]] = Producer(
        lambda: map(transfer, _groups(batches, num_stack)),
        prefetch + 1,
        "to-device",
        # Looked up at each check, not bound now: Concurrently swaps in its shared stop event later.
        lambda: batches._shared.stopped.is_set(),
    )

    def gen() -> Iterator[DeviceBatch]:
        batches._shared.threads.append(feeder.thread)
        feeder.start()
        try:
            while True:
                t0 = time.perf_counter()
                try:
                    transferred = feeder.get()
                except StopIteration:
                    return
                except ProducerError as e:
                    raise carrying(
                        ToDeviceError, f"ToDevice: producing batches failed: {e.error!r}", e.error
                    ) from e.error
                stats["wait_s"] += time.perf_counter() - t0
                for batch in transferred:
                    stats["batches"] += 1
                    it.context.info["to_device"] = dict(stats, megabytes=stats["bytes"] / 1e6)
                    yield batch
        finally:
            feeder.close()

    it = LocalIterator(gen, batches._shared, f"{batches.name}.ToDevice")
    return it


def _groups(batches: LocalIterator[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive ready items of ``batches`` in lists of ``size``."""
    pending: list[Any] = []
    for item in batches._items():
        if item is NOT_READY:
            continue
        pending.append(item)
        if len(pending) == size:
            yield pending
            pending = []


def _transfer(
    learner: Learner | LearnerGroup,
    to_host: Callable[[Any], Mapping[str, np.ndarray]],
    stats: dict[str, Any],
    items: list[Any],
) -> list[DeviceBatch]:
    """One ``device_put`` of ``items``' arrays, sharded along the sample axis over the learner's devices."""
    if isinstance(learner, LearnerGroup):  # rows the workers stored go as they are
        return [DeviceBatch.of(stored_or_placed(learner, to_host, i), i) for i in items]
    hosts = [dict(to_host(i)) for i in items]
    n = len(jax.tree.leaves(hosts[0])[0])
    if n % learner.num_devices:
        raise ValueError(f"ToDevice: a batch of {n} samples cannot be split evenly over {learner.num_devices} devices.")
    nbytes = sum(v.nbytes for v in jax.tree.leaves(hosts))
    # One update (atomic under the GIL), so a consumer's snapshot never sees half of it.
    stats.update(bytes=stats["bytes"] + nbytes, transfers=stats["transfers"] + 1)
    if len(hosts) == 1:  # nothing to stack: no host copy, no slicing on the device
        return [
            DeviceBatch.of(
                jax.device_put(dict(hosts[0]), NamedSharding(learner.mesh, PartitionSpec("batch"))), items[0]
            )
        ]
    # Slices along the unsharded stack axis stay on their devices.
    stacked = NamedSharding(learner.mesh, PartitionSpec(None, "batch"))
    data = jax.device_put(jax.tree.map(lambda *x: np.stack(x), *hosts), stacked)
    return [DeviceBatch.of(jax.tree.map(lambda v, i=i: v[i], data), item) for i, item in enumerate(items)]


def stored_or_placed(
    group: LearnerGroup, to_host: Callable[[Any], Mapping[str, Any]], item: Any
) -> GroupRows | StoredRows:
    """A group's batch: the rows the workers stored as they are, else ``to_host(item)`` placed."""
    data = getattr(item, "data", None)
    return data if isinstance(data, StoredRows) else group.place(to_host(item))
