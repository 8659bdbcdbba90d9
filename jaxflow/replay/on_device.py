"""A replay buffer that lives on the device, as pure functions over a :class:`DeviceReplayState`.

Proportional prioritized replay (Schaul et al., 2016, "Prioritized Experience Replay") for
on-device training: a ring of transitions with one priority ``p_i^alpha`` each (``alpha=0``:
uniform), stratified sampling by inverse CDF (``cumsum`` + ``searchsorted``, one pass of
the priorities per sampled batch, which on an accelerator is cheaper than keeping a
sum-tree in step with scatter updates), and importance weights ``(N P(i))^-beta``
normalised by their buffer-wide maximum, as :class:`~jaxflow.replay.PrioritizedReplayBuffer`
does on the host. Everything is traceable, so the buffer can be carried through
``lax.scan`` and ``vmap``-ed over independent agents.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

Array = jax.Array


class DeviceReplayState(NamedTuple):
    """Transitions ``data[name]: [capacity, ...]``, their priorities ``p^alpha`` (0 where empty),
    the next slot to write and the number of filled slots."""

    data: dict[str, Array]
    priorities: Array
    position: Array
    size: Array


def init(example: Mapping[str, Array], capacity: int) -> DeviceReplayState:
    """An empty buffer for transitions shaped like ``example`` (one transition, no batch axis)."""
    data = {k: jnp.zeros((capacity,) + jnp.shape(v), jnp.result_type(v)) for k, v in example.items()}
    return DeviceReplayState(
        data, jnp.zeros((capacity,), jnp.float32), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)
    )


def add(state: DeviceReplayState, items: Mapping[str, Array], priorities: Array, alpha: float) -> DeviceReplayState:
    """Writes ``n`` transitions (``items[name]: [n, ...]``) over the oldest slots, with
    priorities ``priorities ** alpha``; ``n`` must not exceed the capacity."""
    capacity = state.priorities.shape[0]
    n = priorities.shape[0]
    chex.assert_tree_shape_prefix(dict(items), (n,))
    if n > capacity:
        raise ValueError(f"cannot add {n} transitions to a replay buffer of capacity {capacity}")
    slots = (state.position + jnp.arange(n)) % capacity
    data = {k: v.at[slots].set(items[k].astype(v.dtype)) for k, v in state.data.items()}
    return DeviceReplayState(
        data,
        state.priorities.at[slots].set(jnp.power(priorities, alpha).astype(jnp.float32)),
        (state.position + n) % capacity,
        jnp.minimum(state.size + n, capacity),
    )


def slots_at(priorities: Array, u: Array, cdf: Array | None = None) -> Array:
    """The slots whose share of the priority mass holds each position ``u`` (in ``[0, sum p)``)
    of the inverse CDF (``cdf``, the priorities' ``cumsum``, where the caller has it); every
    slot returned has a positive priority where any slot has one.

    XLA's ``cumsum`` rounds each prefix on its own (a windowed sum, not a running one), so the
    CDF is not exactly non-decreasing: a slot of priority 0 can own a sliver of the mass
    (57 of 3,709 zero slots among 12,800 float32 priorities, measured), and a draw there would
    weigh ``0^-beta = inf``: a NaN loss, rarely (about 1e-8 of the mass for R2D2's Ray-mode
    ring of 4,016 sequences with 16 zero slots; more where more slots are empty). A draw in
    such a sliver moves to the nearest slot before it that has mass (or the first one).

    Example:
        >>> slots_at(jnp.array([0.0, 1.0, 0.0, 3.0, 0.0]), jnp.array([0.5, 1.5, 3.99, 4.5])).tolist()
        [1, 3, 3, 3]
    """
    n = priorities.shape[0]
    cdf = jnp.cumsum(priorities) if cdf is None else cdf
    drawn = jnp.clip(jnp.searchsorted(cdf, u, side="right"), 0, n - 1)
    has_mass = priorities > 0
    last_with_mass = jax.lax.cummax(jnp.where(has_mass, jnp.arange(n), -1))[drawn]
    return jnp.where(last_with_mass >= 0, last_with_mass, jnp.argmax(has_mass)).astype(jnp.int32)


def stratified_slots(priorities: Array, key: Array, batch_size: int) -> Array:
    """``batch_size`` slots drawn in proportion to ``priorities [N]``: one from each of
    ``batch_size`` equal slices of the mass (stratified inverse-CDF sampling), by :func:`slots_at`."""
    cdf = jnp.cumsum(priorities)
    u = (jnp.arange(batch_size) + jax.random.uniform(key, (batch_size,))) * (cdf[-1] / batch_size)
    return slots_at(priorities, u, cdf)


def sample(
    state: DeviceReplayState, key: Array, batch_size: int, beta: Array | float
) -> tuple[dict[str, Array], Array, Array]:
    """``(transitions, slots, importance_weights)`` of ``batch_size`` draws, slot ``i`` with
    probability ``p_i / sum_j p_j``: one draw from each of ``batch_size`` equal slices of the
    priority mass (stratified, as in Schaul et al.'s rank-free proportional variant).

    Weights are ``(p_i / p_min)^-beta``, i.e. ``(N P(i))^-beta`` divided by the largest weight
    any filled slot could get, so they lie in ``(0, 1]``.
    """
    slots = stratified_slots(state.priorities, key, batch_size)
    p = state.priorities[slots]
    filled = jnp.arange(state.priorities.shape[0]) < state.size
    p_min = jnp.min(jnp.where(filled & (state.priorities > 0), state.priorities, jnp.inf))
    weights = jnp.power(p / p_min, -beta)
    return {k: v[slots] for k, v in state.data.items()}, slots, weights


def update_priorities(state: DeviceReplayState, slots: Array, priorities: Array, alpha: float) -> DeviceReplayState:
    """Sets the priorities of ``slots`` to ``priorities ** alpha`` (the last write wins for repeats)."""
    return state._replace(priorities=state.priorities.at[slots].set(jnp.power(priorities, alpha).astype(jnp.float32)))
