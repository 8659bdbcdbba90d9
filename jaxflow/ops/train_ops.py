"""Train operators: learner updates, gradients computed on workers, weight syncs to the
workers, target-network refreshes.
"""

from __future__ import annotations

import time
from typing import Any

from jaxflow.config.constants import ENV_STEPS_TRAINED, NUM_UPDATES, NUM_WEIGHT_SYNCS
from jaxflow.dataflow.iterators import Operator
from jaxflow.dataflow.stored_rows import BATCHES_LOST
from jaxflow.learn.learner import Learner
from jaxflow.ops.metrics import Context
from jaxflow.ops.rollout_ops import RecordSampled
from jaxflow.rollout.batch import Batch, GradientsResult, SampleBatch
from jaxflow.rollout.worker import RolloutWorker
from jaxflow.rollout.worker_set import WorkerSet


class TrainOneStep(Operator):
    """Runs the learner's update (all epochs and minibatches) on a batch; returns its metrics.

    The learner trains on the batch's ``train_arrays()`` (a replayed batch's include its
    importance ``weights``). A batch with a ``replay_source`` gives ``(batch, metrics)``,
    so that ``UpdatePriorities`` can route the per-sample TD errors back to the shard.

    Example:
        >>> batches.for_each(TrainOneStep(learner))  # doctest: +SKIP
    """

    def __init__(self, learner: Learner):
        self.learner = learner

    def __call__(self, batch: Batch, ctx: Context) -> Any:
        t0 = time.perf_counter()
        metrics = self.learner.update(batch.train_arrays())
        record_update(ctx, metrics, batch.num_samples, update_time_s=time.perf_counter() - t0)
        return metrics if batch.replay_source is None else (batch, metrics)


def record_update(ctx: Context, metrics: dict[str, Any], samples: int, **info: float) -> None:
    """Counts one learner update of ``samples`` items; its scalar metrics go to the results.
    A batch a learner group lost (:data:`~jaxflow.dataflow.stored_rows.BATCHES_LOST`) is
    counted as lost, not trained."""
    if metrics.get(BATCHES_LOST):
        ctx.counters[BATCHES_LOST] += 1
        return
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
            assert ctx.current_actor is not None, "ApplyGradients follows a gather from the workers"
            self.workers.set_weights_of(ctx.current_actor[0], weights, version)
        ctx.counters[NUM_WEIGHT_SYNCS] += 1
        return result.metrics


NUM_TARGET_UPDATES = "num_target_updates"


class UpdateTargetNetwork(Operator):
    """Updates the learner's target network every ``target_update_period`` optimizer steps;
    passes items through. With ``tau = 1`` the parameters are copied (Mnih et al., 2015);
    with a smaller ``tau`` the target moves by ``1 - (1 - tau)^k`` toward them after ``k``
    steps, Polyak averaging applied once per update rather than per step. The learner moves
    it inside the update it falls due in (:meth:`~jaxflow.learn.Learner.follow_target`, one
    compiled call); this operator counts ``num_target_updates``.

    Example:
        >>> trained.for_each(UpdateTargetNetwork(learner, target_update_period=500))  # doctest: +SKIP
        >>> trained.for_each(UpdateTargetNetwork(learner, 1, tau=0.005))  # SAC  # doctest: +SKIP
    """

    def __init__(self, learner: Learner, target_update_period: int, tau: float = 1.0):
        self.learner = learner
        learner.follow_target(target_update_period, tau)
        self._counted = learner.target_updates

    def __call__(self, item: Any, ctx: Context) -> Any:
        done = self.learner.target_updates
        ctx.counters[NUM_TARGET_UPDATES] += done - self._counted
        self._counted = done
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
        assert ctx.current_actor is not None, "UpdateWorkerWeights follows a gather from the workers"
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
