"""Policy networks (flax) and the pure policy step that rollout workers run."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


class MLPActorCritic(nn.Module):
    """Separate tanh MLPs for the policy logits and the state value.

    Orthogonal initialisation with a small policy head, as in the PPO
    implementation study (Andrychowicz et al., 2021, "What Matters in On-Policy RL").
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = obs.astype(jnp.float32).reshape(obs.shape[:-1] + (-1,))

        def torso(h: jax.Array) -> jax.Array:
            for width in self.hidden_sizes:
                h = jnp.tanh(nn.Dense(width, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(h))
            return h

        logits = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))(torso(x))
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(torso(x))
        return logits, value[..., 0]


def policy_step(
    apply_fn: Callable[..., tuple[jax.Array, jax.Array]], params: Any, obs: jax.Array, key: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Samples actions for a batch of observations.

    Returns ``(next_key, action [B], logp [B], value [B], logits [B, A])``.
    """
    key, sub = jax.random.split(key)
    logits, value = apply_fn(params, obs)
    action = jax.random.categorical(sub, logits)
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=-1)[:, 0]
    return key, action.astype(jnp.int32), logp, value, logits


def greedy_action(apply_fn: Callable[..., tuple[jax.Array, jax.Array]], params: Any, obs: jax.Array) -> jax.Array:
    """The most likely action for each observation (evaluation)."""
    logits, _ = apply_fn(params, obs)
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
