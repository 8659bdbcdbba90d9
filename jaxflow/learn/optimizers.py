"""Optimizer transformations the learners need beyond optax's own."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax


def every_k_steps(inner: optax.GradientTransformation, k: int) -> optax.GradientTransformationExtraArgs:
    """``inner``'s update on every ``k``-th SGD step (steps ``0, k, 2k, ...``), zero updates
    and an unchanged ``inner`` state in between: TD3's delayed policy updates (Fujimoto et
    al., 2018), where the actor steps with the gradient of that step alone.
    ``optax.MultiSteps`` differs: it applies the mean of the ``k`` gradients.

    The step is the train state's (``update(..., step=)``, which
    :func:`~jaxflow.learn.sgd.sgd_step` passes), so a loss can skip the gradient the
    optimizer will not apply (TD3's ``loss``), and a skipped non-finite step keeps the phase.
    Off steps run no ``inner`` update at all (a ``lax.cond``).

    Example:
        >>> opt = every_k_steps(optax.sgd(1.0), 2)
        >>> state = opt.init(jnp.zeros(1))
        >>> [float(opt.update(jnp.ones(1), state, None, step=jnp.int32(s))[0][0]) for s in (0, 1)]
        [-1.0, 0.0]
    """

    def update(updates: Any, state: Any, params: Any = None, *, step: jax.Array, **extra: Any) -> tuple[Any, Any]:
        del extra

        def skip(u: Any, s: Any, p: Any) -> tuple[Any, Any]:
            return jax.tree.map(jnp.zeros_like, u), s

        return jax.lax.cond(step % k == 0, inner.update, skip, updates, state, params)

    return optax.GradientTransformationExtraArgs(inner.init, update)
