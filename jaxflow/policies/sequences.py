"""What a recurrent policy learns from: whole sequences with the state they started from.

A fragment of a recurrent policy carries two more fields: ``episode_starts [T, B]`` (True
where the step's observation is an episode's first, so the state is reset before it) and
``policy_state``, each env's state at the fragment's first step (``[B, ...]``, before that
step's reset). :func:`sequence_batch` turns the time-major fragment into ``B`` sequences,
batch-major ``[B, T, ...]``, so that minibatches taken along the leading axis
(:func:`~jaxflow.learn.sgd.sgd_update`) split by sequence, never by time step;
:func:`policy_outputs` is what a loss calls in place of ``policy.apply``: a recurrent
policy's unroll over each sequence from its stored state (Hausknecht and Stone, 2015,
"Deep Recurrent Q-Learning for POMDPs": updates replay whole sequences), a feed-forward
policy's ``apply``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from jaxflow.policies.policy import Policy

Array = jax.Array

STATE_FIELD = "policy_state"
"""The recurrent state each sequence starts from (not time-indexed)."""
STARTS_FIELD = "episode_starts"
"""``[T, B]`` True where an observation is an episode's first."""
SEQUENCE_FIELDS = (STARTS_FIELD, STATE_FIELD)
"""What a recurrent policy's fragment holds besides a feed-forward one's."""


def sequence_batch(traj: Mapping[str, Any]) -> dict[str, Any]:
    """A time-major fragment ``[T, B, ...]`` as ``B`` batch-major sequences ``[B, T, ...]``;
    ``policy_state`` (already ``[B, ...]``) unchanged.

    Example:
        >>> import numpy as np
        >>> batch = sequence_batch({"obs": np.zeros((5, 3, 4)), "policy_state": np.zeros((3, 8))})
        >>> batch["obs"].shape, batch["policy_state"].shape
        ((3, 5, 4), (3, 8))
    """
    return {k: v if k == STATE_FIELD else v.swapaxes(0, 1) for k, v in traj.items()}


def _flat(x: Array) -> Array:
    return x.reshape((-1,) + x.shape[2:])


def policy_outputs(policy: Policy, params: Any, batch: Mapping[str, Any]) -> tuple[Array, Array, dict[str, Any]]:
    """``(distribution inputs [N, D], values [N], batch)`` for a loss: a feed-forward policy's
    ``apply`` on a flat batch (returned as it is); a recurrent policy's :meth:`Policy.unroll`
    over each of a :func:`sequence_batch`'s ``B`` sequences of ``T`` steps from its
    ``policy_state``, resetting at ``episode_starts``, with the batch's fields flattened to
    ``N = B * T`` in the same order."""
    if not policy.recurrent:
        inputs, values = policy.apply(params, batch["obs"])
        return inputs, values, dict(batch)
    obs, starts = batch["obs"].swapaxes(0, 1), batch[STARTS_FIELD].swapaxes(0, 1)
    _, inputs, values = policy.unroll(params, batch[STATE_FIELD], obs, starts)
    flat = {k: _flat(v) for k, v in batch.items() if k != STATE_FIELD}
    return _flat(inputs.swapaxes(0, 1)), _flat(values.swapaxes(0, 1)), flat
