"""Distributional Q-networks read as Q-values: C51's categorical distributions over a fixed
support (Bellemare et al., 2017, "A Distributional Perspective on Reinforcement Learning")
and QR-DQN's quantiles (Dabney et al., 2018, "Distributional Reinforcement Learning with
Quantile Regression").

Everything that acts (workers' exploration, device mode, greedy evaluation, a truncated
episode's bootstrap value) reads a distribution ``[B, A, N]`` through its mean, the
Q-value, so :func:`~jaxflow.policies.q_value_outputs` masks illegal actions on it as it does
for a plain Q-network: an illegal action is never chosen, greedily or by a target's max.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxflow.policies.policy import q_value_outputs

Array = jax.Array


def categorical_support(v_min: float, v_max: float, num_atoms: int) -> Array:
    """C51's atoms ``z_i = v_min + i (v_max - v_min) / (N - 1)``.

    Example:
        >>> categorical_support(-1.0, 1.0, 5).tolist()
        [-1.0, -0.5, 0.0, 0.5, 1.0]
    """
    return jnp.asarray(np.linspace(v_min, v_max, num_atoms), jnp.float32)


def categorical_q_outputs(
    logits: Array, legal: Array | None = None, *, v_min: float, v_max: float
) -> tuple[Array, Array]:
    """A C51 network's logits ``[B, A, N]`` read as a Q-policy's ``(Q [B, A], max_a Q [B])``:
    ``Q(s, a) = sum_i softmax(logits)_i z_i``, then masked as :func:`q_value_outputs` masks."""
    z = categorical_support(v_min, v_max, logits.shape[-1])
    return q_value_outputs(jnp.sum(jax.nn.softmax(logits, axis=-1) * z, axis=-1), legal)


def quantile_q_outputs(quantiles: Array, legal: Array | None = None) -> tuple[Array, Array]:
    """A QR-DQN network's quantiles ``[B, A, N]`` read as ``(Q [B, A], max_a Q [B])``: the
    mean of the quantiles, masked as :func:`q_value_outputs` masks."""
    return q_value_outputs(quantiles.mean(axis=-1), legal)
