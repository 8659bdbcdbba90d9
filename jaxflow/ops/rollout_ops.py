"""Rollout operators: sample from the workers, count what was sampled, join fragments into
train batches, standardize fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxflow.config.constants import ENV_STEPS_SAMPLED
from jaxflow.dataflow.actors import ParallelIterator
from jaxflow.dataflow.iterators import Operator
from jaxflow.dataflow.stored_rows import StoredRows, StoreRows
from jaxflow.learn.group import LearnerGroup
from jaxflow.ops.metrics import Context
from jaxflow.rollout.batch import GradientsResult, SampleBatch, SampleTiming, concat_batches, train_arrays
from jaxflow.rollout.worker_set import WorkerSet


class RecordSampled(Operator):
    """Counts a batch's env steps and episodes (and their ``on_episode_end`` metrics) in the plan's
    metrics (used by ``ParallelRollouts``), and adds up the workers'
    :class:`~jaxflow.rollout.batch.SampleTiming` under ``info["sampler"]`` (seconds since the
    plan started: sampling, of which env steps and waiting for the policy)."""

    def __call__(self, batch: SampleBatch | GradientsResult, ctx: Context) -> Any:
        ctx.counters[ENV_STEPS_SAMPLED] += batch.env_steps
        ctx.record_episodes(batch.episode_returns, batch.episode_lengths)
        ctx.record_episode_metrics(batch.episode_metrics)
        if batch.timing is not None:
            totals = ctx.info.setdefault("sampler", dict.fromkeys(SampleTiming._fields, 0.0))
            for name, seconds in batch.timing._asdict().items():
                totals[name] += seconds
        return batch


def bulk_sync_env_steps(config: Any) -> int:
    """Env steps in each batch of ``ParallelRollouts(bulk_sync).combine(ConcatBatches(
    config.train_batch_size))``: whole rounds of every worker's fragment."""
    per_round = (
        max(1, config.rollout.num_workers) * config.rollout.num_envs_per_worker * config.rollout.rollout_fragment_length
    )
    return -(-config.train_batch_size // per_round) * per_round


def ParallelRollouts(
    workers: WorkerSet,
    mode: str = "bulk_sync",
    num_async: int = 1,
    to_learner: Any = None,
    to_host: Callable[[Any], Mapping[str, Any]] = train_arrays,
) -> Any:
    """Sample batches from every rollout worker.

    * ``"bulk_sync"``: each item is one fragment from every worker, concatenated;
      workers sample in lockstep with the consumer (on-policy).
    * ``"async"``: fragments in completion order, ``num_async`` requests in flight per worker.
    * ``"raw"``: the :class:`ParallelIterator` itself, for actor-side ``par_for_each``.

    With ``to_learner`` a :class:`~jaxflow.learn.group.LearnerGroup`, each worker makes its
    fragment's learner rows (``to_host``) and keeps them in the object store for the learner
    processes to fetch (:mod:`jaxflow.dataflow.stored_rows`); the batches carry references.

    Example:
        >>> rollouts = ParallelRollouts(workers, mode="bulk_sync")  # doctest: +SKIP
        >>> batch = next(rollouts)                                  # doctest: +SKIP
    """
    rollouts: ParallelIterator[Any] = ParallelIterator(
        workers, "sample", Context(num_episodes=workers.config.metrics_num_episodes), name="ParallelRollouts"
    )
    if isinstance(to_learner, LearnerGroup):  # rows go straight to its processes
        rollouts = rollouts.par_for_each(StoreRows(to_host))
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
        if isinstance(batch.data, StoredRows):  # rows on their way to a learner group, which standardizes them
            return batch._replace(data=batch.data._replace(standardize=tuple(self.fields)))
        return batch._replace(data=standardize_fields(batch.data, self.fields))


def standardize_fields(data: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """``data`` with the named fields shifted and scaled to mean 0, standard deviation 1
    (numpy or JAX arrays, so device mode standardizes inside its compiled call)."""
    out = dict(data)
    for f in fields:
        x = out[f]
        out[f] = ((x - x.mean()) / (x.std() + 1e-8)).astype(x.dtype)
    return out
