"""Policy networks (flax) and the pure functions that act with them."""

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


class MLPQNetwork(nn.Module):
    """A ReLU MLP with one Q-value per action, optionally with a dueling head.

    Dueling (Wang et al., 2016, "Dueling Network Architectures for Deep Reinforcement
    Learning"): ``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)``. Returns ``(q, max_a q)`` so
    rollout workers treat it like an actor-critic network (Q-values in place of logits,
    the greedy value in place of the state value).
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    dueling: bool = True

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        # One leading batch axis; stacked frames ([B, k, ...]) are flattened with the rest.
        h = obs.astype(jnp.float32).reshape(obs.shape[0], -1)
        for width in self.hidden_sizes:
            h = nn.relu(nn.Dense(width)(h))
        if self.dueling:
            adv = nn.Dense(self.num_actions)(h)
            q = nn.Dense(1)(h) + adv - adv.mean(axis=-1, keepdims=True)
        else:
            q = nn.Dense(self.num_actions)(h)
        return q, q.max(axis=-1)


def forward_packed(apply_fn: Callable[..., tuple[jax.Array, jax.Array]], params: Any, obs: jax.Array) -> jax.Array:
    """``[B, A + 1]``: the logits, then the value, in one array (one transfer to the host)."""
    logits, value = apply_fn(params, obs)
    return jnp.concatenate([logits, value[:, None]], axis=-1)


def greedy_action(apply_fn: Callable[..., tuple[jax.Array, jax.Array]], params: Any, obs: jax.Array) -> jax.Array:
    """The most likely action for each observation (evaluation)."""
    logits, _ = apply_fn(params, obs)
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
