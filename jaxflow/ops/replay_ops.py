"""Replay operators: store fragments into replay shards, replay batches from them, send new
priorities back (Horgan et al., 2018, "Distributed Prioritized Experience Replay").

Each takes the shard actors (:class:`~jaxflow.replay.shards.ReplayShards`) or the replay in
the driver's process (:class:`~jaxflow.replay.local.LocalReplay`, whose shard they call
directly: no Ray call, no pickling); a plan does not tell them apart.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError

from jaxflow.dataflow.actors import ParallelIterator
from jaxflow.dataflow.iterators import NOT_READY, LocalIterator, Operator, from_iterator
from jaxflow.dataflow.stored_rows import BATCHES_LOST
from jaxflow.learn.group import LearnerGroup
from jaxflow.ops.metrics import Context
from jaxflow.replay.local import LocalReplay
from jaxflow.replay.replayed import ReplayBatch
from jaxflow.replay.shards import ReplayShards
from jaxflow.rollout.batch import Batch

REPLAY_ITEMS_STORED = "replay_items_stored"
REPLAY_ITEMS_DROPPED = "replay_items_dropped"


class _ShardCalls:
    """Calls to replay shards and the replies still owed: at most ``limit`` calls to shard
    actors in flight, the oldest waited for before another is sent (``limit=1`` waits for
    every reply at once); a :class:`LocalReplay`'s shard is called directly, its reply at once.

    The shard actors' :class:`ReplayShards` is told to :meth:`flush` them before a checkpoint
    (``ReplayShards.settle``): a threaded shard may export its contents before the calls still
    in flight run, and their replies update the counters the checkpoint saves."""

    def __init__(self, shards: ReplayShards | LocalReplay, limit: int, wait_s: float = 0.0):
        if limit < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {limit}")
        self.shards, self.limit = shards, limit
        # A reply may take the shards' timeout plus what the call itself may wait in the shard.
        self.timeout_s = 0.0 if isinstance(shards, LocalReplay) else shards.timeout_s + wait_s
        self._pending: list[tuple[ray.ObjectRef, int, Any]] = []
        # An asynchronous plan's thread calls while the driver's settles before a checkpoint.
        self._lock = threading.Lock()
        if isinstance(shards, ReplayShards):
            shards.settle_before_saving(self.flush)

    def call(self, shard: int, method: str, args: tuple[Any, ...], on_reply: Callable[[Any], None]) -> None:
        """``method(*args)`` on shard ``shard``; ``on_reply`` gets its reply once it is in."""
        if isinstance(self.shards, LocalReplay):
            on_reply(
                getattr(self.shards.shard, method)(*(ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in args))
            )
            return
        with self._lock:
            self._pending.append((getattr(self.shards.actors[shard], method).remote(*args), shard, on_reply))
            while len(self._pending) >= self.limit:
                self._settle(self._pending.pop(0))

    def flush(self) -> None:
        """Waits for every call still in flight and hands each reply to its ``on_reply``."""
        with self._lock:
            while self._pending:
                self._settle(self._pending.pop(0))

    def _settle(self, call: tuple[ray.ObjectRef, int, Any]) -> None:
        ref, shard, on_reply = call
        try:
            reply = ray.get(ref, timeout=self.timeout_s)
        except ObjectLostError:  # rows a worker stored died with it before the shard fetched them
            reply = None
        except (RayActorError, GetTimeoutError) as e:
            assert not isinstance(self.shards, LocalReplay), "only calls to shard actors are pending"
            self.shards.on_failure(shard, e)
            reply = None  # a source that replaces failed shards instead of raising lost this call
        on_reply(reply)


class StoreToReplay(Operator):
    """Stores each batch in one replay shard and passes it on unchanged (Ape-X's actors → replay).

    What is stored is the batch's ``replay_rows()``: a fragment's items flattened from
    time-major ``[T, B]`` to ``[T * B]``, or the :class:`~jaxflow.replay.ReplayRows` its
    workers packed (each observation stored once), as they are. The shard is
    ``shard`` if given, else drawn uniformly by a generator seeded with ``seed``. With
    ``by_actor`` (after a gather from actors, which records the actor) actor ``i``'s
    batches all go to shard ``i % num_shards``, one at a time (``max_in_flight=1``), so the
    shard sees each actor's batches in order (R2D2's sequences run on from one fragment into
    the next), with ``source=(i, replaced)``: ``replaced`` counts the times actor ``i``'s
    handle changed (a restarted worker), where the stream of its batches broke off.

    At most ``max_in_flight`` stores await the shards' replies (1: each call waits for its
    reply, so counts are exact when it returns); beyond that the producer waits, so a
    shard that holds inserts back slows the producer down instead of letting calls queue
    without bound. ``replay_items_stored`` counts admitted items and
    ``replay_items_dropped`` those the shard's rate limiter refused within ``timeout_s``,
    as the replies arrive; :meth:`flush` waits for all of them, which every checkpoint does
    first (``ReplayShards.settle``). A :class:`LocalReplay` stores in the call and counts at once.

    Example:
        >>> store = ParallelRollouts(workers, mode="async").for_each(StoreToReplay(shards))  # doctest: +SKIP
    """

    def __init__(
        self,
        shards: ReplayShards | LocalReplay,
        shard: int | None = None,
        seed: int = 0,
        timeout_s: float = 0.0,
        max_in_flight: int = 1,
        by_actor: bool = False,
    ):
        if by_actor and (shard is not None or max_in_flight != 1):
            raise ValueError("StoreToReplay(by_actor=True) picks the shard itself and keeps order: max_in_flight=1.")
        self.shards, self.shard, self.timeout_s, self.by_actor = shards, shard, timeout_s, by_actor
        self._rng = np.random.default_rng(seed)
        self._calls = _ShardCalls(shards, max_in_flight, timeout_s)
        self._actors: dict[int, tuple[Any, int]] = {}  # by_actor: index -> (handle, times replaced)

    def __call__(self, item: Batch, ctx: Context) -> Batch:
        data, n = item.replay_rows(), item.num_samples

        def count(added: int | None) -> None:
            ctx.counters[REPLAY_ITEMS_STORED] += added or 0
            ctx.counters[REPLAY_ITEMS_DROPPED] += n - (added or 0)

        if self.by_actor:
            assert ctx.current_actor is not None, "StoreToReplay(by_actor=True) follows a gather from actors"
            i, handle = ctx.current_actor
            last, replaced = self._actors.get(i, (handle, 0))
            self._actors[i] = (handle, replaced + (handle is not last))
            source = (i, self._actors[i][1])
            self._calls.call(i % self.shards.num_shards, "add", (data, None, self.timeout_s, source), count)
            return item
        index = self.shard if self.shard is not None else int(self._rng.integers(self.shards.num_shards))
        self._calls.call(index, "add", (data, None, self.timeout_s), count)
        return item

    def flush(self) -> None:
        """Waits for every store still in flight."""
        self._calls.flush()


def _replay_ready(batch: ReplayBatch | None) -> Any:
    return NOT_READY if batch is None else batch


def _sampled_in_call(replay: LocalReplay) -> Iterator[Any]:
    while True:
        yield _replay_ready(replay.sample())


def ParallelReplay(
    shards: ReplayShards | LocalReplay,
    batch_size: int,
    beta: Any = 0.4,
    num_async: int = 1,
    sample_wait_s: float | None = None,
    to_learner: Any = None,
    in_turn: bool = False,
) -> LocalIterator[ReplayBatch]:
    """Replayed batches of ``batch_size`` items from every shard, in completion order.

    ``num_async`` sample requests are in flight per shard. ``beta`` is a number or a
    function of nothing, evaluated per request (e.g. an ``optax.linear_schedule`` of the
    learner's step). A shard that cannot answer yet (too few items, or its rate limiter
    holds back) waits up to ``sample_wait_s`` (default: the shards' setting) and then
    answers "not ready", which this iterator passes on as ``NOT_READY``: ``Concurrently``
    then moves on to its other ops instead of waiting here. From a :class:`LocalReplay`
    each pull samples in the call (``num_async`` has nothing to overlap). With ``to_learner``
    a :class:`~jaxflow.learn.group.LearnerGroup`, shard actors keep each batch's rows in their
    object store and hand over a reference (:mod:`jaxflow.dataflow.stored_rows`), which the
    learner processes fetch straight from the shards' nodes.

    With ``in_turn`` the shards answer round by round, in shard order (``gather_sync``): each
    round's requests are all answered before any batch is handed on and before the plan calls
    a shard again, so no request waits in a (threaded) shard actor while stores or priorities
    reach it, and a run replays the same batches whatever the timing (``num_async`` is then 1).

    Example:
        >>> feed = ParallelReplay(shards, batch_size=512, num_async=4).for_each(Enqueue(thread.inqueue))  # doctest: +SKIP
    """
    if isinstance(shards, ReplayShards) and isinstance(to_learner, LearnerGroup):
        source: ReplayShards | LocalReplay = shards.sampling(batch_size, beta, sample_wait_s, store=True)
    else:
        source = shards.sampling(batch_size, beta, sample_wait_s)
    if isinstance(source, LocalReplay):
        return from_iterator(functools.partial(_sampled_in_call, source), Context(), "ParallelReplay")
    replies: ParallelIterator[ReplayBatch | None] = ParallelIterator(source, "sample", Context(), name="ParallelReplay")
    gathered = replies.gather_sync() if in_turn else replies.gather_async(num_async)
    return gathered.for_each(_replay_ready)


class UpdatePriorities:
    """Sends new priorities for a replayed batch to the shard it came from.

    Takes ``(replay_batch, metrics)`` from ``TrainOneStep`` or a learner thread (the batch
    may have gone through ``ToDevice``, which keeps its indices and shard); the new
    priorities are ``|metrics["td_error"]| + priority_eps`` (Schaul et al., 2016: the epsilon that keeps
    every transition reachable). Returns the item unchanged. At most ``max_in_flight``
    updates await their replies (1: each waits), so invalid priorities surface here
    rather than being lost, and before a checkpoint (``ReplayShards.settle``) all are waited
    for; a shard restarted since the batch was drawn ignores them.

    Example:
        >>> Dequeue(thread).for_each(UpdatePriorities(shards))  # doctest: +SKIP
    """

    def __init__(self, shards: ReplayShards | LocalReplay, priority_eps: float = 1e-6, max_in_flight: int = 1):
        self.shards, self.priority_eps = shards, priority_eps
        self._calls = _ShardCalls(shards, max_in_flight)

    def __call__(self, item: tuple[Batch, dict[str, Any]]) -> tuple[Batch, dict[str, Any]]:
        batch, metrics = item
        if metrics.get(BATCHES_LOST):  # never trained on (its rows died with their shard): no new priorities
            return item
        source = batch.replay_source
        assert source is not None, "UpdatePriorities takes batches replayed from the shards"
        priorities = np.abs(np.asarray(metrics["td_error"], np.float64)) + self.priority_eps
        args = (source.indices, priorities, source.generation)
        self._calls.call(source.shard, "update_priorities", args, lambda _: None)
        return item

    def flush(self) -> None:
        """Waits for every update still in flight."""
        self._calls.flush()
