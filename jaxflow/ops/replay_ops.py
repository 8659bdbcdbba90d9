"""Replay operators: store fragments into replay shards, replay batches from them, send new
priorities back (Horgan et al., 2018, "Distributed Prioritized Experience Replay").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayActorError

from jaxflow.dataflow.actors import ParallelIterator
from jaxflow.dataflow.iterators import NOT_READY, LocalIterator, Operator
from jaxflow.ops.metrics import Context
from jaxflow.replay.shard import ReplayBatch
from jaxflow.replay.shards import ReplayShards
from jaxflow.rollout.batch import Batch

REPLAY_ITEMS_STORED = "replay_items_stored"


REPLAY_ITEMS_DROPPED = "replay_items_dropped"


class _ShardCalls:
    """Replies still owed by replay shards: at most ``limit`` calls in flight; the oldest is
    waited for before another is sent. ``limit=1`` waits for every reply at once."""

    def __init__(self, shards: ReplayShards, limit: int, timeout_s: float):
        if limit < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {limit}")
        self.shards, self.limit, self.timeout_s = shards, limit, timeout_s
        self._pending: list[tuple[ray.ObjectRef, int, Any]] = []

    def send(self, ref: ray.ObjectRef, shard: int, on_reply: Any) -> None:
        self._pending.append((ref, shard, on_reply))
        while len(self._pending) >= self.limit:
            self._settle(self._pending.pop(0))

    def flush(self) -> None:
        while self._pending:
            self._settle(self._pending.pop(0))

    def _settle(self, call: tuple[ray.ObjectRef, int, Any]) -> None:
        ref, shard, on_reply = call
        try:
            reply = ray.get(ref, timeout=self.timeout_s)
        except (RayActorError, GetTimeoutError) as e:
            self.shards.on_failure(shard, e)
            reply = None  # a source that replaces failed shards instead of raising lost this call
        on_reply(reply)


class StoreToReplay(Operator):
    """Stores each batch in one replay shard and passes it on unchanged (Ape-X's actors → replay).

    What is stored is the batch's ``replay_rows()``: a fragment's items flattened from
    time-major ``[T, B]`` to ``[T * B]``, or the :class:`~jaxflow.replay.ReplayRows` its
    workers packed (each observation stored once), as they are. The shard is
    ``shard`` if given, else drawn uniformly by a generator seeded with ``seed``.

    At most ``max_in_flight`` stores await the shards' replies (1: each call waits for its
    reply, so counts are exact when it returns); beyond that the producer waits, so a
    shard that holds inserts back slows the producer down instead of letting calls queue
    without bound. ``replay_items_stored`` counts admitted items and
    ``replay_items_dropped`` those the shard's rate limiter refused within ``timeout_s``,
    as the replies arrive; :meth:`flush` waits for all of them.

    Example:
        >>> store = ParallelRollouts(workers, mode="async").for_each(StoreToReplay(shards))  # doctest: +SKIP
    """

    def __init__(
        self,
        shards: ReplayShards,
        shard: int | None = None,
        seed: int = 0,
        timeout_s: float = 0.0,
        max_in_flight: int = 1,
    ):
        self.shards, self.shard, self.timeout_s = shards, shard, timeout_s
        self._rng = np.random.default_rng(seed)
        self._calls = _ShardCalls(shards, max_in_flight, shards.timeout_s + timeout_s)

    def __call__(self, item: Batch, ctx: Context) -> Batch:
        data, n = item.replay_rows(), item.num_samples
        index = self.shard if self.shard is not None else int(self._rng.integers(len(self.shards.actors)))

        def count(added: int | None) -> None:
            ctx.counters[REPLAY_ITEMS_STORED] += added or 0
            ctx.counters[REPLAY_ITEMS_DROPPED] += n - (added or 0)

        self._calls.send(self.shards.actors[index].add.remote(data, None, self.timeout_s), index, count)
        return item

    def flush(self) -> None:
        """Waits for every store still in flight."""
        self._calls.flush()


def _replay_ready(batch: ReplayBatch | None) -> Any:
    return NOT_READY if batch is None else batch


def ParallelReplay(
    shards: ReplayShards, batch_size: int, beta: Any = 0.4, num_async: int = 1, sample_wait_s: float | None = None
) -> LocalIterator[ReplayBatch]:
    """Replayed batches of ``batch_size`` items from every shard, in completion order.

    ``num_async`` sample requests are in flight per shard. ``beta`` is a number or a
    function of nothing, evaluated per request (e.g. an ``optax.linear_schedule`` of the
    learner's step). A shard that cannot answer yet (too few items, or its rate limiter
    holds back) waits up to ``sample_wait_s`` (default: the shards' setting) and then
    answers "not ready", which this iterator passes on as ``NOT_READY``: ``Concurrently``
    then moves on to its other ops instead of waiting here.

    Example:
        >>> feed = ParallelReplay(shards, batch_size=512, num_async=4).for_each(Enqueue(thread.inqueue))  # doctest: +SKIP
    """
    source = shards.sampling(batch_size, beta, sample_wait_s)
    return (
        ParallelIterator(source, "sample", Context(), name="ParallelReplay")
        .gather_async(num_async)
        .for_each(_replay_ready)
    )


class UpdatePriorities:
    """Sends new priorities for a replayed batch to the shard it came from.

    Takes ``(replay_batch, metrics)`` from ``TrainOneStep`` or a learner thread (the batch
    may have gone through ``ToDevice``, which keeps its indices and shard); the new
    priorities are ``|metrics["td_error"]| + priority_eps`` (Schaul et al., 2016: the epsilon that keeps
    every transition reachable). Returns the item unchanged. At most ``max_in_flight``
    updates await their replies (1: each waits), so invalid priorities surface here
    rather than being lost; a shard restarted since the batch was drawn ignores them.

    Example:
        >>> Dequeue(thread).for_each(UpdatePriorities(shards))  # doctest: +SKIP
    """

    def __init__(self, shards: ReplayShards, priority_eps: float = 1e-6, max_in_flight: int = 1):
        self.shards, self.priority_eps = shards, priority_eps
        self._calls = _ShardCalls(shards, max_in_flight, shards.timeout_s)

    def __call__(self, item: tuple[Batch, dict[str, Any]]) -> tuple[Batch, dict[str, Any]]:
        batch, metrics = item
        source = batch.replay_source
        assert source is not None, "UpdatePriorities takes batches replayed from the shards"
        priorities = np.abs(np.asarray(metrics["td_error"], np.float64)) + self.priority_eps
        actor = self.shards.actors[source.shard]
        self._calls.send(
            actor.update_priorities.remote(source.indices, priorities, source.generation), source.shard, lambda _: None
        )
        return item

    def flush(self) -> None:
        """Waits for every update still in flight."""
        self._calls.flush()
