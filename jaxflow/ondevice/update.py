"""The update step of device mode: from a fresh batch or from an on-device replay buffer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxflow.learn.sgd import TrainState, move_target, sgd_step, target_fraction
from jaxflow.ondevice.spec import DeviceReplay

Array = jax.Array


def replay_update(
    loss_fn: Any,
    optimizer: optax.GradientTransformation,
    rs: DeviceReplay,
    train: TrainState,
    replay: Any,
    transitions: Mapping[str, Array],
    key: Array,
):
    """Adds a fragment's transitions to the buffer (``rs.buffer``), then (once it holds ``learning_starts``)
    trains on ``rs.sgd_steps`` replayed batches: importance-weighted loss, new priorities
    ``|TD error| + eps`` (a loss with sequences gives each sequence's priority as its ``td_error``), and the target network updated every ``target_update_period`` steps.
    Returns ``(train, replay, scalar metrics, samples trained)``."""
    replay = rs.buffer.add(replay, transitions, rs.alpha)

    def sgd(carry, key):
        train, replay = carry
        batch, slots, weights = rs.buffer.sample(replay, key, rs.batch_size, rs.beta(train.step))
        train, metrics = sgd_step(loss_fn, optimizer, train, dict(batch, weights=weights))
        replay = rs.buffer.update_priorities(
            replay, slots, jnp.abs(metrics.pop("td_error")) + rs.priority_eps, rs.alpha
        )
        fraction = target_fraction(rs.tau, rs.target_update_period)
        train = jax.lax.cond(
            train.step % rs.target_update_period == 0, lambda s: move_target(s, fraction), lambda s: s, train
        )
        return (train, replay), metrics

    def learn(carry):
        (train, replay), metrics = jax.lax.scan(sgd, carry, jax.random.split(key, rs.sgd_steps))
        return train, replay, jax.tree.map(jnp.mean, metrics), jnp.float32(rs.sgd_steps * rs.batch_size)

    def wait(carry):
        shapes = jax.eval_shape(learn, carry)[2]
        return carry[0], carry[1], jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes), jnp.float32(0)

    return jax.lax.cond(replay.size >= rs.learning_starts, learn, wait, (train, replay))
