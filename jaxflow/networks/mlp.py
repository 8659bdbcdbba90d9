"""Multi-layer perceptrons for flat observations: an actor-critic and a Q-network."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def policy_head(module: nn.Module, h: jax.Array, num_outputs: int, num_free_outputs: int = 0) -> jax.Array:
    """A policy's distribution inputs ``[*batch, num_outputs]`` from features ``h``: a dense
    layer of small orthogonal initialisation (near-uniform / near-zero-mean first actions),
    then ``num_free_outputs`` parameters of ``module`` that do not depend on the observation
    (a Gaussian's state-independent log-std, initialised to 0), broadcast over the batch."""
    out = nn.Dense(num_outputs - num_free_outputs, kernel_init=nn.initializers.orthogonal(0.01))(h)
    if num_free_outputs:
        free = module.param("free_inputs", nn.initializers.zeros, (num_free_outputs,))
        out = jnp.concatenate([out, jnp.broadcast_to(free, (*out.shape[:-1], num_free_outputs))], axis=-1)
    return out


class MLPActorCritic(nn.Module):
    """Separate tanh MLPs for the policy's distribution inputs and the state value.

    Orthogonal initialisation with a small policy head, as in the PPO
    implementation study (Andrychowicz et al., 2021, "What Matters in On-Policy RL").
    """

    num_outputs: int
    """The distribution's inputs per observation (``ActionDistribution.num_inputs``)."""
    hidden_sizes: Sequence[int] = (64, 64)
    obs_ndim: int = 1
    """Trailing axes of an observation, flattened into the first layer's input (3 for MinAtar's [10, 10, 4])."""
    num_free_outputs: int = 0
    """Of those, how many are parameters rather than outputs (``ActionDistribution.num_free_inputs``)."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = obs.astype(jnp.float32).reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,))

        def torso(h: jax.Array) -> jax.Array:
            for width in self.hidden_sizes:
                h = jnp.tanh(nn.Dense(width, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(h))
            return h

        inputs = policy_head(self, torso(x), self.num_outputs, self.num_free_outputs)
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(torso(x))
        return inputs, value[..., 0]


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
