"""Device feeding: host batches become device batches on a background thread, a few
large prefetched transfers instead of many small blocking ones.

The learner's step is fast on an accelerator; what starves it is the host: building
a batch, then one ``device_put`` per array while the device sits idle. ``ToDevice``
moves that work off the learner's path. A thread pulls host batches from the plan,
stacks ``num_stack`` of them into one buffer per field, places each buffer with one
``jax.device_put`` already sharded for the learner's devices (leading batch axis over
the mesh), and keeps at most ``prefetch`` transfers ready, so the next batches are on
their way while the learner trains on the current one (double buffering with
``prefetch=2``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jaxflow.config.constants import POLL_S
from jaxflow.dataflow.iterators import NOT_READY, LocalIterator
from jaxflow.learn.learner import Learner
from jaxflow.rollout.batch import flatten_time_major


class DeviceBatch(NamedTuple):
    """A train batch already on the learner's devices, and what came with it."""

    data: dict[str, jax.Array]
    """``{field: [N, ...]}``, sharded along ``N`` over the learner's devices."""
    env_steps: int
    """Env steps the batch holds (``N`` for items that do not say, e.g. replayed ones)."""
    weights_version: int
    """Learner version of the weights that acted (-1 where unknown)."""
    source: Any
    """The host item it was made from, with its ``data`` dropped (e.g. a replayed batch's
    indices and shard, for priority updates)."""


class ToDeviceError(RuntimeError):
    """The feeding thread failed; the original error is the cause."""


def host_batch(item: Any) -> dict[str, np.ndarray]:
    """The default ``to_host``: a time-major ``SampleBatch`` flattened to ``[T * B, ...]``."""
    return flatten_time_major(item.data)


def device_data(batch: DeviceBatch) -> dict[str, jax.Array]:
    """The learner's batch of a :class:`DeviceBatch` (a learner thread's ``to_host_batch``)."""
    return batch.data


def ToDevice(
    batches: LocalIterator[Any],
    learner: Learner,
    to_host: Callable[[Any], dict[str, np.ndarray]] = host_batch,
    num_stack: int = 1,
    prefetch: int = 2,
) -> LocalIterator[DeviceBatch]:
    """Device batches from host ones, fed by a background thread.

    ``num_stack`` consecutive host batches (same fields and shapes) become one transfer: one
    ``[num_stack, N, ...]`` buffer per field, placed sharded along ``N``; the consumer then
    gets them back one by one, as on-device slices that stay on their shards. At most
    ``prefetch`` transfers wait, so the thread never runs further ahead than that. The
    plan's ``info["to_device"]`` gets bytes moved, transfers made and the seconds the
    consumer waited for data; an error in the thread (or upstream) is raised to the
    consumer as :class:`ToDeviceError` instead of leaving it waiting.

    Example:
        >>> batches = ParallelRollouts(workers).combine(ConcatBatches(4096))    # doctest: +SKIP
        >>> train = ToDevice(batches, learner).for_each(TrainOneStep(learner))  # doctest: +SKIP
    """
    if num_stack < 1 or prefetch < 1:
        raise ValueError(f"ToDevice: num_stack and prefetch must be >= 1, got {num_stack} and {prefetch}.")
    flat = NamedSharding(learner.mesh, PartitionSpec("batch"))
    stacked = NamedSharding(learner.mesh, PartitionSpec(None, "batch"))
    ready: queue.Queue = queue.Queue(maxsize=prefetch)
    stop = threading.Event()
    stats = {"bytes": 0, "transfers": 0, "batches": 0, "wait_s": 0.0}

    def transfer(items: list[Any]) -> list[tuple[dict[str, jax.Array], Any]]:
        hosts = [to_host(i) for i in items]
        n = len(next(iter(hosts[0].values())))
        if n % learner.num_devices:
            raise ValueError(
                f"ToDevice: a batch of {n} samples cannot be split evenly over {learner.num_devices} devices."
            )
        nbytes = sum(v.nbytes for h in hosts for v in h.values())
        # One update (atomic under the GIL), so a consumer's snapshot never sees half of it.
        stats.update(bytes=stats["bytes"] + nbytes, transfers=stats["transfers"] + 1)
        if len(hosts) == 1:  # nothing to stack: no host copy, no slicing on the device
            return [(jax.device_put(hosts[0], flat), items[0])]
        # Slices along the unsharded stack axis stay on their devices.
        data = jax.device_put({k: np.stack([h[k] for h in hosts]) for k in hosts[0]}, stacked)
        return [({k: v[i] for k, v in data.items()}, item) for i, item in enumerate(items)]

    def stopping() -> bool:
        return stop.is_set() or batches._shared.stopped.is_set()

    def hand_over(out: Any) -> None:
        # Blocks while `prefetch` transfers wait, but gives up once the consumer or the plan has stopped.
        while not stopping():
            try:
                ready.put(out, timeout=POLL_S)
                return
            except queue.Full:
                continue

    def produce() -> None:
        try:
            pending: list[Any] = []
            for item in batches._items():
                if stopping():
                    return
                if item is NOT_READY:
                    continue
                pending.append(item)
                if len(pending) == num_stack:
                    out, pending = transfer(pending), []
                    hand_over(out)
        except BaseException as e:  # handed to the consumer, which raises it
            hand_over(e)

    thread = threading.Thread(target=produce, daemon=True, name="to-device")

    def gen() -> Iterator[DeviceBatch]:
        ctx = it.context
        batches._shared.threads.append(thread)
        thread.start()
        try:
            while True:
                t0 = time.perf_counter()
                while True:
                    try:
                        got = ready.get(timeout=POLL_S)
                        break
                    except queue.Empty:
                        if not thread.is_alive():
                            raise ToDeviceError("ToDevice: the feeding thread stopped without an error.") from None
                stats["wait_s"] += time.perf_counter() - t0
                if isinstance(got, BaseException):
                    raise ToDeviceError(f"ToDevice: producing batches failed: {got!r}") from got
                for data, item in got:
                    stats["batches"] += 1
                    ctx.info["to_device"] = dict(stats, megabytes=stats["bytes"] / 1e6)
                    yield DeviceBatch(
                        data,
                        getattr(item, "env_steps", len(next(iter(data.values())))),
                        getattr(item, "weights_version", -1),
                        item._replace(data=None) if hasattr(item, "_replace") and hasattr(item, "data") else item,
                    )
        finally:
            stop.set()

    it = LocalIterator(gen, batches._shared, f"{batches.name}.ToDevice")
    return it
