"""Optimizer transformations the learners need beyond optax's own."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax


class EveryKState(NamedTuple):
    """The inner optimizer's state and the steps taken so far."""

    inner: Any
    steps: jax.Array


def every_k_steps(inner: optax.GradientTransformation, k: int) -> optax.GradientTransformation:
    """``inner``'s update on every ``k``-th step (the first, then every ``k``), zero updates
    and an unchanged ``inner`` state in between: TD3's delayed policy updates (Fujimoto et
    al., 2018), where the actor steps with the gradient of that step alone.
    ``optax.MultiSteps`` differs: it applies the mean of the ``k`` gradients.

    Example:
        >>> opt = every_k_steps(optax.sgd(1.0), 2)
        >>> state = opt.init(jnp.zeros(1))
        >>> [float(opt.update(jnp.ones(1), s, None)[0][0]) for s in (state, state._replace(steps=jnp.int32(1)))]
        [-1.0, 0.0]
    """

    def init(params: Any) -> EveryKState:
        return EveryKState(inner.init(params), jnp.zeros((), jnp.int32))

    def update(updates: Any, state: EveryKState, params: Any = None) -> tuple[Any, EveryKState]:
        apply = state.steps % k == 0
        new_updates, new_inner = inner.update(updates, state.inner, params)
        updates = jax.tree.map(lambda u: jnp.where(apply, u, jnp.zeros_like(u)), new_updates)
        kept = jax.tree.map(lambda n, o: jnp.where(apply, n, o), new_inner, state.inner)
        return updates, EveryKState(kept, state.steps + 1)

    return optax.GradientTransformation(init, update)
