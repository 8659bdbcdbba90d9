"""RL operators: the CapWords pieces that plans are written in (RLlib Flow's vocabulary)."""

from __future__ import annotations

import queue
import time
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayActorError

from jaxflow.device import DeviceBatch
from jaxflow.iterators import (
    NOT_READY,
    LocalIterator,
    Operator,
    ParallelIterator,
    from_iterator,
)
from jaxflow.learner import Learner, LearnerThread, put
from jaxflow.metrics import (
    ENV_STEPS_SAMPLED,
    ENV_STEPS_TRAINED,
    NUM_UPDATES,
    NUM_WEIGHT_SYNCS,
    Context,
)
from jaxflow.replay import ReplayRows
from jaxflow.replay_shards import ReplayBatch, ReplayShards
from jaxflow.workers import (
    GradientsResult,
    RolloutWorker,
    SampleBatch,
    SampleTiming,
    WorkerSet,
    concat_batches,
    flatten_time_major,
)


class RecordSampled(Operator):
    """Counts a batch's env steps and episodes in the plan's metrics (used by ``ParallelRollouts``),
    and adds up the workers' :class:`~jaxflow.workers.SampleTiming` under ``info["sampler"]``
    (seconds since the plan started: sampling, of which env steps and waiting for the policy)."""

    def __call__(self, batch: SampleBatch | GradientsResult, ctx: Context) -> Any:
        ctx.counters[ENV_STEPS_SAMPLED] += batch.env_steps
        ctx.record_episodes(batch.episode_returns, batch.episode_lengths)
        if batch.timing is not None:
            totals = ctx.info.setdefault("sampler", dict.fromkeys(SampleTiming._fields, 0.0))
            for name, seconds in batch.timing._asdict().items():
                totals[name] += seconds
        return batch


def bulk_sync_env_steps(config: Any) -> int:
    """Env steps in each batch of ``ParallelRollouts(bulk_sync).combine(ConcatBatches(
    config.train_batch_size))``: whole rounds of every worker's fragment."""
    per_round = max(1, config.num_workers) * config.num_envs_per_worker * config.rollout_fragment_length
    return -(-config.train_batch_size // per_round) * per_round


def ParallelRollouts(workers: WorkerSet, mode: str = "bulk_sync", num_async: int = 1) -> Any:
    """Sample batches from every rollout worker.

    * ``"bulk_sync"``: each item is one fragment from every worker, concatenated;
      workers sample in lockstep with the consumer (on-policy).
    * ``"async"``: fragments in completion order, ``num_async`` requests in flight per worker.
    * ``"raw"``: the :class:`ParallelIterator` itself, for actor-side ``par_for_each``.

    Example:
        >>> rollouts = ParallelRollouts(workers, mode="bulk_sync")  # doctest: +SKIP
        >>> batch = next(rollouts)                                  # doctest: +SKIP
    """
    rollouts = ParallelIterator(workers, "sample", Context(num_episodes=workers.config.metrics_num_episodes), name="ParallelRollouts")
    if mode == "raw":
        return rollouts
    if mode == "bulk_sync":
        return rollouts.batch_across_shards().for_each(concat_batches).for_each(RecordSampled())
    if mode == "async":
        return rollouts.gather_async(num_async).for_each(RecordSampled())
    raise ValueError(f"ParallelRollouts: mode must be 'bulk_sync', 'async' or 'raw', got {mode!r}")


class ConcatBatches:
    """Concatenates fragments until at least ``min_env_steps`` env steps, then emits one batch.

    Example:
        >>> rollouts.combine(ConcatBatches(4096))  # doctest: +SKIP
    """

    def __init__(self, min_env_steps: int):
        self.min_env_steps = min_env_steps
        self._buffer: list[SampleBatch] = []
        self._count = 0

    def __call__(self, batch: SampleBatch) -> list[SampleBatch]:
        self._buffer.append(batch)
        self._count += batch.env_steps
        if self._count < self.min_env_steps:
            return []
        out = concat_batches(self._buffer)
        self._buffer, self._count = [], 0
        return [out]


class StandardizeFields:
    """Shifts and scales the named fields of a batch to mean 0, standard deviation 1.

    Example:
        >>> batches.for_each(StandardizeFields(["advantages"]))  # doctest: +SKIP
    """

    def __init__(self, fields: Sequence[str]):
        self.fields = list(fields)

    def __call__(self, batch: SampleBatch) -> SampleBatch:
        return batch._replace(data=standardize_fields(batch.data, self.fields))


def standardize_fields(data: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """``data`` with the named fields shifted and scaled to mean 0, standard deviation 1
    (numpy or JAX arrays, so device mode standardizes inside its compiled call)."""
    out = dict(data)
    for f in fields:
        x = out[f]
        out[f] = ((x - x.mean()) / (x.std() + 1e-8)).astype(x.dtype)
    return out


class TrainOneStep(Operator):
    """Runs the learner's update (all epochs and minibatches) on a batch; returns its metrics.

    For a replayed batch (:class:`~jaxflow.replay_shards.ReplayBatch`) the importance
    weights go in as the field ``weights`` and the result is ``(batch, metrics)``, so
    that ``UpdatePriorities`` can route the per-sample TD errors back to the shard.

    Example:
        >>> batches.for_each(TrainOneStep(learner))  # doctest: +SKIP
    """

    def __init__(self, learner: Learner):
        self.learner = learner

    def __call__(self, batch: SampleBatch | DeviceBatch | ReplayBatch, ctx: Context) -> Any:
        t0 = time.perf_counter()
        if isinstance(batch, DeviceBatch):
            data = batch.data
        elif isinstance(batch, ReplayBatch):
            data = replay_train_batch(batch)
        else:
            data = flatten_time_major(batch.data)
        metrics = self.learner.update(data)
        record_update(ctx, metrics, num_samples(batch), update_time_s=time.perf_counter() - t0)
        return (batch, metrics) if isinstance(batch, ReplayBatch) else metrics


def replay_train_batch(batch: ReplayBatch) -> dict[str, np.ndarray]:
    """The learner's flat batch for a replayed one: its fields plus importance ``weights``."""
    return dict(batch.data, weights=batch.weights)


def record_update(ctx: Context, metrics: dict[str, Any], samples: int, **info: float) -> None:
    """Counts one learner update of ``samples`` items; its scalar metrics go to the results."""
    ctx.counters[ENV_STEPS_TRAINED] += samples
    ctx.counters[NUM_UPDATES] += 1
    ctx.info["learner"] = dict({k: v for k, v in metrics.items() if isinstance(v, float)}, **info)


class BroadcastWeights(Operator):
    """Sends the learner's weights to every rollout worker (one object-store put), after
    every ``every_n``-th item.

    Example:
        >>> trained.for_each(BroadcastWeights(learner, workers))  # doctest: +SKIP
    """

    def __init__(self, learner: Learner, workers: WorkerSet, every_n: int = 1):
        self.learner, self.workers, self.every_n = learner, workers, every_n
        self._count = 0

    def __call__(self, item: Any, ctx: Context) -> Any:
        self._count += 1
        if self._count % self.every_n == 0:
            self.workers.sync_weights(self.learner.get_weights(), self.learner.version)
            ctx.counters[NUM_WEIGHT_SYNCS] += 1
        return item


class ComputeGradients(Operator):
    """Actor side: turns a worker's fragment into gradients of the algorithm's loss.

    Example:
        >>> ParallelRollouts(workers, mode="raw").par_for_each(ComputeGradients())  # doctest: +SKIP
    """

    def __call__(self, batch: SampleBatch, worker: RolloutWorker) -> GradientsResult:
        return worker.compute_gradients(batch)


class ApplyGradients(Operator):
    """Applies one worker's gradients, then sends the new weights back to that worker
    alone (A3C) or to all workers (``update_all=True``).

    Example:
        >>> grads.gather_async().for_each(ApplyGradients(learner, workers))  # doctest: +SKIP
    """

    def __init__(self, learner: Learner, workers: WorkerSet, update_all: bool = False):
        self.learner, self.workers, self.update_all = learner, workers, update_all

    def __call__(self, result: GradientsResult, ctx: Context) -> dict[str, float]:
        RecordSampled()(result, ctx)
        self.learner.apply_gradients(result.grads)
        ctx.counters[ENV_STEPS_TRAINED] += result.env_steps
        ctx.counters[NUM_UPDATES] += 1
        ctx.info["learner"] = dict(result.metrics, policy_lag=self.learner.version - 1 - result.weights_version)
        weights, version = self.learner.get_weights(), self.learner.version
        if self.update_all:
            self.workers.sync_weights(weights, version)
        else:
            self.workers.set_weights_of(ctx.current_actor[0], weights, version)
        ctx.counters[NUM_WEIGHT_SYNCS] += 1
        return result.metrics


def ReportMetrics(train: LocalIterator[Any], workers: WorkerSet | None, min_env_steps_per_iteration: int = 0) -> LocalIterator[dict[str, Any]]:
    """Turns a stream of training steps into one result dict per training iteration.

    An iteration pulls at least one item and at least ``min_env_steps_per_iteration``
    sampled env steps. ``time_s`` is wall time since training began, carried across
    resumes through the context's ``time_s`` counter.

    Example:
        >>> results = ReportMetrics(train_op, workers)  # doctest: +SKIP
        >>> next(results)["episode_return_mean"]       # doctest: +SKIP
    """

    def gen() -> Iterable[dict[str, Any]]:
        ctx = train.context
        clock, time_base = time.monotonic(), ctx.counters["time_s"]
        while True:
            t0, s0 = time.monotonic(), ctx.counters[ENV_STEPS_SAMPLED]
            next(train)
            while ctx.counters[ENV_STEPS_SAMPLED] - s0 < min_env_steps_per_iteration:
                next(train)
            now = time.monotonic()
            ctx.counters["training_iteration"] += 1
            ctx.counters["time_s"] = time_base + (now - clock)
            yield results(ctx, workers, ctx.counters[ENV_STEPS_SAMPLED] - s0, now - t0)

    return LocalIterator(gen, train._shared, "ReportMetrics")


def results(ctx: Context, workers: WorkerSet | None, steps_this_iter: int, seconds_this_iter: float) -> dict[str, Any]:
    """The standard result dict (DESIGN.md) from a plan's context (``workers`` is None in
    device mode, which has no rollout workers)."""
    c = ctx.counters
    out = {
        "training_iteration": int(c["training_iteration"]),
        ENV_STEPS_SAMPLED: int(c[ENV_STEPS_SAMPLED]),
        ENV_STEPS_TRAINED: int(c[ENV_STEPS_TRAINED]),
        **ctx.episode_stats(),
        "env_steps_per_s": steps_this_iter / max(seconds_this_iter, 1e-9),
        "time_s": float(c["time_s"]),
        "time_this_iter_s": seconds_this_iter,
        NUM_UPDATES: int(c[NUM_UPDATES]),
        NUM_WEIGHT_SYNCS: int(c[NUM_WEIGHT_SYNCS]),
        "num_worker_restarts": workers.num_restarts if workers is not None else 0,
        "num_healthy_workers": workers.num_healthy if workers is not None else 0,
        "learner": dict(ctx.info.get("learner", {})),
        # Whatever else the plan's operators report: learner queues, device feeding.
        **{k: dict(v) for k, v in ctx.info.items() if k != "learner"},
    }
    if ctx.member_names:
        out["members"] = ctx.member_results()
    return out


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

    A :class:`SampleBatch` is flattened from time-major ``[T, B]`` to ``[T * B]`` items,
    unless its workers packed it as :class:`~jaxflow.replay.ReplayRows` (each observation
    stored once; stored as they are); a plain dict is stored as is. The shard is
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

    def __init__(self, shards: ReplayShards, shard: int | None = None, seed: int = 0, timeout_s: float = 0.0, max_in_flight: int = 1):
        self.shards, self.shard, self.timeout_s = shards, shard, timeout_s
        self._rng = np.random.default_rng(seed)
        self._calls = _ShardCalls(shards, max_in_flight, shards.timeout_s + timeout_s)

    def __call__(self, item: SampleBatch | dict[str, np.ndarray], ctx: Context) -> Any:
        data = item.data if isinstance(item, SampleBatch) else item
        if isinstance(data, ReplayRows):
            n = data.num_transitions
        else:
            data = flatten_time_major(data) if isinstance(item, SampleBatch) else data
            n = len(next(iter(data.values())))
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
    return ParallelIterator(source, "sample", Context(), name="ParallelReplay").gather_async(num_async).for_each(_replay_ready)


class UpdatePriorities:
    """Sends new priorities for a replayed batch to the shard it came from.

    Takes ``(replay_batch, metrics)`` from ``TrainOneStep`` or a learner thread (the batch
    may have gone through ``ToDevice``, which keeps its indices and shard); the new
    priorities are ``|metrics["td_error"]| + epsilon`` (Schaul et al., 2016: epsilon keeps
    every transition reachable). Returns the item unchanged. At most ``max_in_flight``
    updates await their replies (1: each waits), so invalid priorities surface here
    rather than being lost; a shard restarted since the batch was drawn ignores them.

    Example:
        >>> Dequeue(thread).for_each(UpdatePriorities(shards))  # doctest: +SKIP
    """

    def __init__(self, shards: ReplayShards, epsilon: float = 1e-6, max_in_flight: int = 1):
        self.shards, self.epsilon = shards, epsilon
        self._calls = _ShardCalls(shards, max_in_flight, shards.timeout_s)

    def __call__(self, item: tuple[ReplayBatch | DeviceBatch, dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
        batch, metrics = item
        if isinstance(batch, DeviceBatch):
            batch = batch.source
        priorities = np.abs(np.asarray(metrics["td_error"], np.float64)) + self.epsilon
        actor = self.shards.actors[batch.shard]
        self._calls.send(actor.update_priorities.remote(batch.indices, priorities, batch.generation), batch.shard, lambda _: None)
        return item

    def flush(self) -> None:
        """Waits for every update still in flight."""
        self._calls.flush()


NUM_TARGET_UPDATES = "num_target_updates"


class UpdateTargetNetwork(Operator):
    """Copies the learner's parameters into its target network every ``every_n_steps``
    optimizer steps (Mnih et al., 2015); passes items through.

    Example:
        >>> trained.for_each(UpdateTargetNetwork(learner, every_n_steps=500))  # doctest: +SKIP
    """

    def __init__(self, learner: Learner, every_n_steps: int):
        self.learner, self.every_n_steps = learner, every_n_steps
        self._last = learner.version

    def __call__(self, item: Any, ctx: Context) -> Any:
        if self.learner.version - self._last >= self.every_n_steps:
            self.learner.update_target()
            self._last = self.learner.version
            ctx.counters[NUM_TARGET_UPDATES] += 1
        return item


class UpdateWorkerWeights(Operator):
    """After a worker's batch, sends it the learner's weights once it has sampled at least
    ``max_weight_sync_delay`` env steps since its last update (Ape-X's actors fetch
    parameters every so often rather than after every batch).

    Follows an async gather, which records the worker that produced the batch.

    Example:
        >>> stored.for_each(UpdateWorkerWeights(learner, workers, max_weight_sync_delay=400))  # doctest: +SKIP
    """

    def __init__(self, learner: Learner, workers: WorkerSet, max_weight_sync_delay: int):
        self.learner, self.workers, self.max_delay = learner, workers, max_weight_sync_delay
        self._steps: dict[int, int] = {}
        self._cache: tuple[int, Any] = (-1, None)

    def __call__(self, batch: SampleBatch, ctx: Context) -> SampleBatch:
        index = ctx.current_actor[0]
        self._steps[index] = self._steps.get(index, 0) + batch.env_steps
        if self._steps[index] >= self.max_delay:
            version = self.learner.version
            if self._cache[0] != version:
                self._cache = (version, self.learner.get_weights())
            self.workers.set_weights_of(index, self._cache[1], version)
            self._steps[index] = 0
            ctx.counters[NUM_WEIGHT_SYNCS] += 1
        return batch


class Enqueue(Operator):
    """Hands items to a learner thread's input queue, blocking while it is full (the
    learner sets the pace); the time spent waiting is in ``info["queues"]``.

    Example:
        >>> ParallelReplay(shards, 512).for_each(Enqueue(thread))  # doctest: +SKIP
    """

    def __init__(self, thread: LearnerThread):
        self.thread = thread

    def __call__(self, item: Any, ctx: Context) -> Any:
        t0 = time.perf_counter()
        if not put(self.thread.inqueue, item, lambda: not self.thread.is_alive()):
            self.thread.check()
            raise RuntimeError("Enqueue: the learner thread has stopped.")
        waits = ctx.info.setdefault("queues", {})
        waits["enqueue_wait_s"] = waits.get("enqueue_wait_s", 0.0) + time.perf_counter() - t0
        return item


def num_samples(batch: Any) -> int:
    """Items a batch trains on: its env steps, replayed items, or leading size."""
    if isinstance(batch, (SampleBatch, DeviceBatch)):
        return batch.env_steps
    if isinstance(batch, ReplayBatch):
        return len(batch.indices)
    return len(next(iter(batch.values())))


def Dequeue(thread: LearnerThread, context: Context | None = None) -> LocalIterator[Any]:
    """The learner thread's outputs ``(batch, metrics)``, counted as updates; ``NOT_READY``
    while none has arrived within half a second (a blocking wait, not a spin), so
    ``Concurrently`` can serve its other ops.

    Example:
        >>> Dequeue(thread).for_each(UpdatePriorities(shards))  # doctest: +SKIP
    """

    def gen() -> Iterable[Any]:
        ctx = it.context
        while not it._shared.stopped.is_set():
            thread.check()
            t0 = time.perf_counter()
            try:
                batch, metrics = thread.outqueue.get(timeout=0.5)
            except queue.Empty:
                yield NOT_READY
                continue
            waits = ctx.info.setdefault("queues", {})
            waits["dequeue_wait_s"] = waits.get("dequeue_wait_s", 0.0) + time.perf_counter() - t0
            waits.update(learner_inqueue_size=thread.inqueue.qsize(), **{f"learner_{k}": v for k, v in thread.stats.items()})
            acted = getattr(batch, "weights_version", -1)
            # Optimizer steps between the weights that acted (where known) and those just trained.
            lag = {"policy_lag": thread.learner.version - acted} if acted >= 0 else {}
            record_update(ctx, metrics, num_samples(batch), **lag)
            yield batch, metrics

    it = from_iterator(gen, context or Context(), name="Dequeue")
    return it
