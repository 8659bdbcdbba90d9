"""RL operators: the CapWords pieces that plans are written in (RLlib Flow's vocabulary)."""

from __future__ import annotations

import time
from typing import Any, Iterable, Sequence

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayActorError

from jaxflow.iterators import LocalIterator, Operator, ParallelIterator
from jaxflow.learner import Learner
from jaxflow.metrics import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED, NUM_UPDATES, NUM_WEIGHT_SYNCS, Context
from jaxflow.replay_shards import ReplayBatch, ReplayShards
from jaxflow.workers import GradientsResult, RolloutWorker, SampleBatch, WorkerSet, concat_batches, flatten_time_major


class RecordSampled(Operator):
    """Counts a batch's env steps and episodes in the plan's metrics (used by ``ParallelRollouts``)."""

    def __call__(self, batch: SampleBatch | GradientsResult, ctx: Context) -> Any:
        ctx.counters[ENV_STEPS_SAMPLED] += batch.env_steps
        ctx.record_episodes(batch.episode_returns, batch.episode_lengths)
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
        data = dict(batch.data)
        for f in self.fields:
            x = data[f]
            data[f] = ((x - x.mean()) / (x.std() + 1e-8)).astype(x.dtype)
        return batch._replace(data=data)


class TrainOneStep(Operator):
    """Runs the learner's update (all epochs and minibatches) on a batch; returns its metrics.

    Example:
        >>> batches.for_each(TrainOneStep(learner))  # doctest: +SKIP
    """

    def __init__(self, learner: Learner):
        self.learner = learner

    def __call__(self, batch: SampleBatch, ctx: Context) -> dict[str, float]:
        t0 = time.perf_counter()
        metrics = self.learner.update(flatten_time_major(batch.data))
        ctx.counters[ENV_STEPS_TRAINED] += batch.env_steps
        ctx.counters[NUM_UPDATES] += 1
        ctx.info["learner"] = dict(metrics, update_time_s=time.perf_counter() - t0)
        return metrics


class BroadcastWeights(Operator):
    """Sends the learner's weights to every rollout worker (one object-store put).

    Example:
        >>> trained.for_each(BroadcastWeights(learner, workers))  # doctest: +SKIP
    """

    def __init__(self, learner: Learner, workers: WorkerSet):
        self.learner, self.workers = learner, workers

    def __call__(self, item: Any, ctx: Context) -> Any:
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


def ReportMetrics(train: LocalIterator[Any], workers: WorkerSet, min_env_steps_per_iteration: int = 0) -> LocalIterator[dict[str, Any]]:
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


def results(ctx: Context, workers: WorkerSet, steps_this_iter: int, seconds_this_iter: float) -> dict[str, Any]:
    """The standard result dict (DESIGN.md) from a plan's context."""
    returns = np.asarray(ctx.episode_returns, np.float64)
    lengths = np.asarray(ctx.episode_lengths, np.float64)
    nan = float("nan")
    c = ctx.counters
    return {
        "training_iteration": int(c["training_iteration"]),
        ENV_STEPS_SAMPLED: int(c[ENV_STEPS_SAMPLED]),
        ENV_STEPS_TRAINED: int(c[ENV_STEPS_TRAINED]),
        "episode_return_mean": float(returns.mean()) if len(returns) else nan,
        "episode_return_min": float(returns.min()) if len(returns) else nan,
        "episode_return_max": float(returns.max()) if len(returns) else nan,
        "episode_len_mean": float(lengths.mean()) if len(lengths) else nan,
        "episodes": int(ctx.episodes_total),
        "env_steps_per_s": steps_this_iter / max(seconds_this_iter, 1e-9),
        "time_s": float(c["time_s"]),
        "time_this_iter_s": seconds_this_iter,
        NUM_UPDATES: int(c[NUM_UPDATES]),
        NUM_WEIGHT_SYNCS: int(c[NUM_WEIGHT_SYNCS]),
        "num_worker_restarts": workers.num_restarts,
        "num_healthy_workers": workers.num_healthy,
        "learner": dict(ctx.info.get("learner", {})),
    }


REPLAY_ITEMS_STORED = "replay_items_stored"
REPLAY_ITEMS_DROPPED = "replay_items_dropped"


class StoreToReplay(Operator):
    """Stores each batch in one replay shard and passes it on unchanged (Ape-X's actors → replay).

    A :class:`SampleBatch` is flattened from time-major ``[T, B]`` to ``[T * B]`` items;
    a plain dict is stored as is. The shard is ``shard`` if given, else drawn uniformly
    by a generator seeded with ``seed``. The call waits for the shard's reply, so the
    counts are exact and a full shard slows the producer down instead of queueing
    without bound: ``replay_items_stored`` counts admitted items, and
    ``replay_items_dropped`` those the shard's rate limiter refused within ``timeout_s``.

    Example:
        >>> store = ParallelRollouts(workers, mode="async").for_each(StoreToReplay(shards))  # doctest: +SKIP
    """

    def __init__(self, shards: ReplayShards, shard: int | None = None, seed: int = 0, timeout_s: float = 0.0):
        self.shards, self.shard, self.timeout_s = shards, shard, timeout_s
        self._rng = np.random.default_rng(seed)

    def __call__(self, item: SampleBatch | dict[str, np.ndarray], ctx: Context) -> Any:
        data = flatten_time_major(item.data) if isinstance(item, SampleBatch) else item
        index = self.shard if self.shard is not None else int(self._rng.integers(len(self.shards.actors)))
        n = len(next(iter(data.values())))
        try:
            added = ray.get(self.shards.actors[index].add.remote(data, None, self.timeout_s), timeout=self.shards.timeout_s + self.timeout_s)
        except (RayActorError, GetTimeoutError) as e:
            self.shards.on_failure(index, e)
            added = 0  # a source that drops failed shards instead of raising lost this batch
        ctx.counters[REPLAY_ITEMS_STORED] += added
        ctx.counters[REPLAY_ITEMS_DROPPED] += n - added
        return item


def _replay_ready(batch: ReplayBatch | None) -> bool:
    return batch is not None


def ParallelReplay(shards: ReplayShards, batch_size: int, beta: float = 0.4, num_async: int = 1) -> LocalIterator[ReplayBatch]:
    """Replayed batches of ``batch_size`` items from every shard, in completion order.

    ``num_async`` sample requests are in flight per shard; a shard whose rate limiter
    holds back answers "not ready" after waiting ``shards.sample_wait_s``, and such
    answers are dropped here, so a starved learner feed waits rather than spins.

    Example:
        >>> feed = ParallelReplay(shards, batch_size=512, num_async=4).for_each(Enqueue(learner.inqueue))  # doctest: +SKIP
    """
    source = shards.sampling(batch_size, beta)
    return ParallelIterator(source, "sample", Context(), name="ParallelReplay").gather_async(num_async).filter(_replay_ready)


class UpdatePriorities:
    """Sends a learner's new priorities for a replayed batch to the shard it came from.

    Takes ``(replay_batch, new_priorities)`` and returns it unchanged. It waits for the
    shard's reply: a threaded shard does not promise to run calls in the order sent,
    and waiting also surfaces invalid priorities here rather than losing them.

    Example:
        >>> Dequeue(learner.outqueue).for_each(UpdatePriorities(shards))  # doctest: +SKIP
    """

    def __init__(self, shards: ReplayShards):
        self.shards = shards

    def __call__(self, item: tuple[ReplayBatch, np.ndarray]) -> tuple[ReplayBatch, np.ndarray]:
        batch, priorities = item
        try:
            ray.get(self.shards.actors[batch.shard].update_priorities.remote(batch.indices, np.asarray(priorities)), timeout=self.shards.timeout_s)
        except (RayActorError, GetTimeoutError) as e:
            self.shards.on_failure(batch.shard, e)
        return item
