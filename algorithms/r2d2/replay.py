"""R2D2's sequence replay on the device, as pure functions (a
:class:`~jaxflow.ondevice.spec.ReplayBuffer`): every env's steps in one time-major ring, each
step stored once; a sequence of ``L = burn_in + trace_length`` steps starts every
``sequence_period`` steps (the paper: overlapping, each with the recurrent state at its start
stored), one priority per sequence.

The ring holds ``M`` blocks of ``P = sequence_period`` steps per env, written one fragment
(``P`` steps of every env, with its start state) at a time; the sequence starting at block
``j`` covers blocks ``j .. j + k - 1`` (``k = L / P``, modulo ``M``). Writing block ``w``
completes the sequence starting at ``w - k + 1`` (it enters with the largest priority given
so far, as in Schaul et al.'s prioritized replay) and ends the one starting at ``w`` (its
first block is overwritten); no other sequence changes. Sequences run across episode ends:
the loss resets the state where ``episode_starts`` says, and no step is padding.

A ring may hold ``K`` lanes side by side (``[M * P, K * E]``), each written by its own stream
of fragments of ``E`` envs at its own pace (``blocks [K]``): Ray mode's replay shards keep one
lane per actor (:mod:`jaxflow.algorithms.r2d2.shard`), device mode has one lane of all its envs.
Sampling and priorities see one ring of ``K * E`` columns either way.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxflow.ondevice.spec import ReplayBuffer
from jaxflow.policies.sequences import STATE_FIELD
from jaxflow.replay.on_device import stratified_slots

Array = jax.Array


class SequenceReplayState(NamedTuple):
    """``steps[name]: [M * P, B, ...]``, ``start_states``: the recurrent state at each block's
    first step ``[M, B, ...]``, ``priorities [M, B]`` (``p^alpha`` of the sequence starting at
    that block, 0 where none can be sampled), ``blocks [K]`` each lane has written so far,
    ``size`` (sequences that can be sampled) and ``max_priority`` (the largest priority given,
    before ``alpha``)."""

    steps: dict[str, Array]
    start_states: Any
    priorities: Array
    blocks: Array
    size: Array
    max_priority: Array


def init(batch: Mapping[str, Any], capacity: int, *, sequence_blocks: int, lanes: int = 1) -> SequenceReplayState:
    """An empty ring of ``lanes`` lanes for fragments shaped like ``batch`` (``[P, E, ...]``
    steps and the ``policy_state`` ``[E, ...]``), holding ``capacity`` sequences of
    ``sequence_blocks`` blocks: ``ceil(capacity / (K E)) + sequence_blocks - 1`` blocks per env."""
    period, lane_envs = batch["actions"].shape[:2]
    num_envs = lanes * lane_envs
    num_blocks = -(-capacity // num_envs) + sequence_blocks - 1
    steps = {
        k: jnp.zeros((num_blocks * period, num_envs, *v.shape[2:]), v.dtype)
        for k, v in batch.items()
        if k != STATE_FIELD
    }
    states = jax.tree.map(lambda v: jnp.zeros((num_blocks, num_envs, *v.shape[1:]), v.dtype), batch[STATE_FIELD])
    zero = jnp.zeros((), jnp.int32)
    return SequenceReplayState(
        steps,
        states,
        jnp.zeros((num_blocks, num_envs), jnp.float32),
        jnp.zeros((lanes,), jnp.int32),
        zero,
        jnp.ones((), jnp.float32),
    )


def add(
    state: SequenceReplayState, batch: Mapping[str, Array], alpha: Any, lane: Any = 0, *, sequence_blocks: int
) -> Any:
    """Writes one fragment (``P`` steps of the lane's ``E`` envs and their start
    ``policy_state``) over the lane's oldest block; the sequences it completes enter with the
    largest priority so far. Other lanes are untouched."""
    num_blocks = state.priorities.shape[0]
    period, width = batch["actions"].shape[:2]
    col, w = lane * width, state.blocks[lane] % num_blocks

    def put(ring: Array, x: Array, row: Any) -> Array:  # x [rows, E, ...] at (row, col)
        return jax.lax.dynamic_update_slice(ring, x.astype(ring.dtype), (row, col) + (0,) * (ring.ndim - 2))

    steps = {k: put(v, batch[k], w * period) for k, v in state.steps.items()}
    states = jax.tree.map(lambda s, x: put(s, x[None], w), state.start_states, batch[STATE_FIELD])
    complete = (w - sequence_blocks + 1) % num_blocks
    blocks = state.blocks.at[lane].add(1)
    new = jnp.where(blocks[lane] >= sequence_blocks, jnp.power(state.max_priority, alpha), 0.0)
    priorities = put(put(state.priorities, jnp.zeros((1, width)), w), jnp.full((1, width), new), complete)
    sequences = jnp.clip(jnp.minimum(blocks, num_blocks) - sequence_blocks + 1, 0, None).sum() * width
    return SequenceReplayState(steps, states, priorities, blocks, sequences.astype(jnp.int32), state.max_priority)


def sample(
    state: SequenceReplayState, key: Array, batch_size: int, beta: Any, *, sequence_length: int
) -> tuple[dict[str, Array], Array, Array]:
    """``(sequences, slots, importance_weights)``: ``batch_size`` sequences, batch-major
    ``[N, L, ...]`` with their start ``policy_state [N, ...]``, drawn in proportion to their
    priorities by stratified inverse-CDF sampling (:func:`~jaxflow.replay.on_device.stratified_slots`);
    weights ``(p / p_min)^-beta`` over the sequences that can be sampled, in ``(0, 1]``."""
    num_blocks, num_envs = state.priorities.shape
    period = state.steps["actions"].shape[0] // num_blocks
    flat = state.priorities.reshape(-1)
    slots = stratified_slots(flat, key, batch_size)
    block, env = slots // num_envs, slots % num_envs
    rows = (block[:, None] * period + jnp.arange(sequence_length)[None, :]) % (num_blocks * period)  # [N, L]
    sequences = {k: v[rows, env[:, None]] for k, v in state.steps.items()}
    sequences[STATE_FIELD] = jax.tree.map(lambda s: s[block, env], state.start_states)
    p_min = jnp.min(jnp.where(flat > 0, flat, jnp.inf))
    return sequences, slots, jnp.power(flat[slots] / p_min, -beta)


def update_priorities(state: SequenceReplayState, slots: Array, priorities: Array, alpha: Any) -> Any:
    """Sets the priorities of the sequences at ``slots`` to ``priorities ** alpha``; the largest
    priority so far grows with them. A slot whose sequence was overwritten since it was drawn
    (priority 0: a lane wrote over its first block, which a Ray-mode shard may do between a
    sample and its update) stays at 0."""
    flat = state.priorities.reshape(-1)
    new = jnp.where(flat[slots] > 0, jnp.power(priorities, alpha), 0.0)
    flat = flat.at[slots].set(new.astype(jnp.float32))
    return state._replace(
        priorities=flat.reshape(state.priorities.shape),
        max_priority=jnp.maximum(state.max_priority, priorities.max()),
    )


def sequence_buffer(burn_in: int, trace_length: int, sequence_period: int, lanes: int = 1) -> ReplayBuffer:
    """The buffer's functions for sequences of ``burn_in + trace_length`` steps, one every
    ``sequence_period`` steps (which divides the length), in a ring of ``lanes`` lanes."""
    length = burn_in + trace_length
    blocks = length // sequence_period
    return ReplayBuffer(
        functools.partial(init, sequence_blocks=blocks, lanes=lanes),
        functools.partial(add, sequence_blocks=blocks),
        functools.partial(sample, sequence_length=length),
        update_priorities,
    )
