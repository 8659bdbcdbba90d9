"""Multi-layer perceptrons for flat observations: an actor-critic and a Q-network."""

from __future__ import annotations

from collections.abc import Sequence

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
    obs_ndim: int = 1
    """Trailing axes of an observation, flattened into the first layer's input (3 for MinAtar's [10, 10, 4])."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = obs.astype(jnp.float32).reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,))

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
    Learning"): ``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)``. Returns the Q-values
    ``[B, A]``; a :class:`~jaxflow.policies.Policy` with
    :func:`~jaxflow.policies.q_value_outputs` reads them as greedy distribution inputs and
    ``max_a Q`` as the value.
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    dueling: bool = True

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        # One leading batch axis; stacked frames ([B, k, ...]) are flattened with the rest.
        h = obs.astype(jnp.float32).reshape(obs.shape[0], -1)
        for width in self.hidden_sizes:
            h = nn.relu(nn.Dense(width)(h))
        if self.dueling:
            adv = nn.Dense(self.num_actions)(h)
            q = nn.Dense(1)(h) + adv - adv.mean(axis=-1, keepdims=True)
        else:
            q = nn.Dense(self.num_actions)(h)
        return q
