"""The :class:`Batch` protocol every batch implements, and what rollout workers send:
time-major fragments and their statistics, and how fragments join."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

import jax
import numpy as np

from jaxflow.dataflow.stored_rows import StoredRows
from jaxflow.policies.sequences import STARTS_FIELD, STATE_FIELD
from jaxflow.replay.buffer import ReplayRows
from jaxflow.rollout.episode_hooks import EpisodeMetrics, merge_metrics

if TYPE_CHECKING:
    from jaxflow.replay.replayed import ReplaySource


class Batch(Protocol):
    """What the plan's operators ask of a batch, whatever made it.

    :class:`SampleBatch` (a worker's fragment), :class:`~jaxflow.rollout.multiagent.MultiAgentBatch`
    (one fragment per policy), :class:`~jaxflow.replay.shard.ReplayBatch` (items drawn from a
    replay shard) and :class:`~jaxflow.learn.to_device.DeviceBatch` (any of them moved onto the
    learner's devices) implement it, so ``TrainOneStep``, ``StoreToReplay``, ``UpdatePriorities``,
    ``ConcatBatches`` and the learner thread serve them all without telling them apart. A new
    kind of batch (a recurrent policy's sequences, say) implements these and the operators
    take it as it is.
    """

    @property
    def env_steps(self) -> int:
        """Environment steps it brings into the run (0 for items replayed from a buffer)."""
        ...

    @property
    def num_samples(self) -> int:
        """Items a learner update on it trains on."""
        ...

    @property
    def weights_version(self) -> int:
        """Learner version of the weights that acted (-1 where unknown, e.g. replayed items)."""
        ...

    @property
    def replay_source(self) -> ReplaySource | None:
        """Where its items lie in a replay shard, for their new priorities (None for fresh samples)."""
        ...

    def train_arrays(self) -> Mapping[str, Any]:
        """The learner's flat batch ``{field: [num_samples, ...]}``."""
        ...

    def replay_rows(self) -> Any:
        """What a replay shard stores of it: flat ``[num_samples, ...]`` fields or encoded rows."""
        ...


B = TypeVar("B", bound="Batch")


def train_arrays(batch: Batch) -> Mapping[str, Any]:
    """A batch's :meth:`Batch.train_arrays`: the default of ``ToDevice``'s ``to_host`` and of
    a learner thread's ``to_host_batch``."""
    return batch.train_arrays()


def concat_batches(batches: Sequence[B]) -> B:
    """Joins batches of one kind (fragments of equal length T along the batch axis; a
    multi-agent batch policy by policy) through that kind's own ``concat``."""
    if len(batches) == 1:
        return batches[0]
    return type(batches[0]).concat(batches)  # type: ignore[attr-defined]


class SampleBatch(NamedTuple):
    """A time-major trajectory fragment ``data[name]: [T, B, ...]`` and what came with it.

    With an ``encode`` step in the :class:`WorkerSpec`, ``data`` is what that returns
    instead (replay rows for DQN and Ape-X, see :class:`~jaxflow.replay.ReplayRows`); sent
    straight to a learner group, the learner's rows in the object store
    (:class:`~jaxflow.dataflow.stored_rows.StoredRows`).
    """

    data: Any
    env_steps: int
    episode_returns: np.ndarray
    """Returns of the episodes that ended inside this fragment."""
    episode_lengths: np.ndarray
    weights_version: int
    """Learner version of the weights that acted."""
    timing: SampleTiming | None = None
    """Where the worker's time went while it sampled this fragment (None where not measured)."""
    episode_metrics: EpisodeMetrics | None = None
    """What ``on_episode_end`` callbacks returned for the episodes that ended in it (None: nothing)."""

    @property
    def num_samples(self) -> int:
        if isinstance(self.data, StoredRows):
            return self.data.samples
        return self.data.num_transitions if isinstance(self.data, ReplayRows) else self.env_steps

    @property
    def replay_source(self) -> None:
        return None

    def train_arrays(self) -> dict[str, Any]:
        """Flat ``[T * B, ...]`` fields; a recurrent policy's fragment (it has ``episode_starts``)
        as ``B`` sequences ``[B, T, ...]`` with their start state, so the learner's minibatches
        split by sequence (:mod:`jaxflow.policies.sequences`); rows stored for a learner
        group as they are."""
        if isinstance(self.data, StoredRows):  # only a learner group is given these: it fetches the rows
            return self.data  # type: ignore[return-value]
        if STARTS_FIELD in self.data:
            return batch_major(self.data)
        return flatten_time_major(self.data)

    def replay_rows(self) -> Any:
        """Encoded rows as they are; a recurrent policy's fragment (it has ``episode_starts``)
        whole, time-major with its start state, for a replay of sequences (R2D2's); else flat.
        Rows a worker stored (one fragment's): their reference, which the shard resolves."""
        if isinstance(self.data, StoredRows):
            (ref,) = self.data.refs
            return ref
        if isinstance(self.data, ReplayRows) or STARTS_FIELD in self.data:
            return self.data
        return flatten_time_major(self.data)

    @staticmethod
    def concat(batches: Sequence[SampleBatch]) -> SampleBatch:
        """Fragments of equal length T joined along the batch axis."""
        data: Any
        if isinstance(batches[0].data, ReplayRows):
            data = ReplayRows.concatenate([b.data for b in batches])
        elif isinstance(batches[0].data, StoredRows):
            data = StoredRows.concatenate([b.data for b in batches])
        else:
            data = {  # a recurrent policy's state is a pytree of [B, ...] arrays
                k: jax.tree.map(
                    lambda *x, k=k: np.concatenate(x, axis=0 if k in PER_ENV_FIELDS else 1),
                    *(b.data[k] for b in batches),
                )
                for k in batches[0].data
            }
        return SampleBatch(
            data,
            sum(b.env_steps for b in batches),
            np.concatenate([b.episode_returns for b in batches]),
            np.concatenate([b.episode_lengths for b in batches]),
            min(b.weights_version for b in batches),
            sum_timings([b.timing for b in batches]),
            merge_metrics(b.episode_metrics for b in batches),
        )


class SampleTiming(NamedTuple):
    """Seconds a rollout worker spent producing fragments: in all (``sample_s``, from the
    call to the returned fragment, postprocessing included), of which stepping the
    environments (``env_s``) and waiting for the policy's forward passes (``policy_s``);
    the rest is the worker's own bookkeeping."""

    sample_s: float
    env_s: float
    policy_s: float


PER_ENV_FIELDS = ("last_obs", "bootstrap_value", STATE_FIELD)
"""Fragment fields with one entry per environment (``[B, ...]``), not per step (``[T, B, ...]``):
the observation and value after the last step, and a recurrent policy's start state (a pytree)."""


def sum_timings(timings: Sequence[SampleTiming | None]) -> SampleTiming | None:
    """The sum of the measured timings, None if none was measured."""
    measured = [t for t in timings if t is not None]
    return SampleTiming(*map(sum, zip(*measured))) if measured else None


def batch_major(data: Mapping[str, Any]) -> dict[str, Any]:
    """A fragment's fields (``[T, B, ...]``, numpy or JAX) as ``B`` sequences ``[B, T, ...]``,
    the :data:`PER_ENV_FIELDS` (already ``[B, ...]``) as they are, so a learner shards and
    splits the batch by sequence."""
    return {k: v if k in PER_ENV_FIELDS else v.swapaxes(0, 1) for k, v in data.items()}


def flatten_time_major(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``[T, B, ...] -> [T * B, ...]`` for every field (a view, no copy)."""
    return {k: v.reshape((-1,) + v.shape[2:]) for k, v in data.items()}


class GradientsResult(NamedTuple):
    """Gradients a worker computed on its own fragment (A3C), plus the fragment's statistics."""

    grads: Any
    metrics: dict[str, float]
    env_steps: int
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    weights_version: int
    timing: SampleTiming | None = None
    """The worker's time sampling the fragment (not computing its gradients)."""
    episode_metrics: EpisodeMetrics | None = None
    """The fragment's ``on_episode_end`` metrics (see :class:`SampleBatch`)."""
