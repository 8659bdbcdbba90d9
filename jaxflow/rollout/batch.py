"""What rollout workers send: time-major fragments and their statistics, and how fragments join."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxflow.replay.buffer import ReplayRows


class SampleBatch(NamedTuple):
    """A time-major trajectory fragment ``data[name]: [T, B, ...]`` and what came with it.

    With an ``encode`` step in the :class:`WorkerSpec`, ``data`` is what that returns
    instead (replay rows for DQN and Ape-X, see :class:`~jaxflow.replay.ReplayRows`).
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


class SampleTiming(NamedTuple):
    """Seconds a rollout worker spent producing fragments: in all (``sample_s``, from the
    call to the returned fragment, postprocessing included), of which stepping the
    environments (``env_s``) and waiting for the policy's forward passes (``policy_s``);
    the rest is the worker's own bookkeeping."""

    sample_s: float
    env_s: float
    policy_s: float


PER_ENV_FIELDS = ("last_obs", "bootstrap_value")
"""Fragment fields with one entry per environment (``[B, ...]``), not per step (``[T, B, ...]``)."""


def concat_batches(batches: Sequence[SampleBatch]) -> SampleBatch:
    """Concatenates fragments of equal length T along the batch axis (a multi-agent batch
    joins policy by policy)."""
    if len(batches) == 1:
        return batches[0]
    if not isinstance(batches[0], SampleBatch):
        return type(batches[0]).concat(batches)
    if isinstance(batches[0].data, ReplayRows):
        data: Any = ReplayRows.concatenate([b.data for b in batches])
    else:
        data = {
            k: np.concatenate([b.data[k] for b in batches], axis=0 if k in PER_ENV_FIELDS else 1)
            for k in batches[0].data
        }
    return SampleBatch(
        data,
        sum(b.env_steps for b in batches),
        np.concatenate([b.episode_returns for b in batches]),
        np.concatenate([b.episode_lengths for b in batches]),
        min(b.weights_version for b in batches),
        sum_timings([b.timing for b in batches]),
    )


def sum_timings(timings: Sequence[SampleTiming | None]) -> SampleTiming | None:
    """The sum of the measured timings, None if none was measured."""
    measured = [t for t in timings if t is not None]
    return SampleTiming(*map(sum, zip(*measured))) if measured else None


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
