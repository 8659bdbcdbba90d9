"""Networks for continuous actions: an actor and a group of Q-functions ``Q(s, a)``, as in
SAC (Haarnoja et al., 2018) and TD3 (Fujimoto et al., 2018), ReLU MLPs on flat observations."""

from __future__ import annotations

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def relu_mlp(h: jax.Array, hidden_sizes: Sequence[int]) -> jax.Array:
    """ReLU layers of ``hidden_sizes`` widths on ``h``."""
    for width in hidden_sizes:
        h = nn.relu(nn.Dense(width)(h))
    return h


class MLPContinuousQ(nn.Module):
    """``Q(s, a) [B]`` from observations ``[B, ...]`` (flattened) and actions ``[B, A]``."""

    hidden_sizes: Sequence[int] = (256, 256)

    @nn.compact
    def __call__(self, obs: jax.Array, actions: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs.astype(jnp.float32).reshape(obs.shape[0], -1), actions], axis=-1)
        h = relu_mlp(x, self.hidden_sizes)
        return nn.Dense(1)(h)[..., 0]


class ActorCritics(nn.Module):
    """An actor giving a distribution's inputs, ``num_critics`` independent Q-functions
    (twin critics: ``num_critics=2``), and with ``initial_alpha`` a learned entropy
    temperature ``log_alpha`` (SAC).

    ``__call__(obs)`` is what a :class:`~jaxflow.policies.Policy` reads: the actor's inputs
    and, as the state's value, ``min_i Q_i(s, tanh(inputs[:, :A]))``, the critics at the
    actor's deterministic action (the squashed mean for SAC, the action itself for TD3);
    workers bootstrap truncated episodes from it. Losses call :meth:`actor` and
    :meth:`critics` through ``apply(..., method=...)``.
    """

    num_outputs: int
    """The distribution's inputs (2A for a squashed Gaussian, A for a deterministic actor)."""
    action_size: int
    hidden_sizes: Sequence[int] = (256, 256)
    num_critics: int = 2
    initial_alpha: float | None = None

    def setup(self) -> None:
        self.actor_torso = nn.Sequential(
            [layer for width in self.hidden_sizes for layer in (nn.Dense(width), nn.relu)]
            + [nn.Dense(self.num_outputs)]
        )
        self.q = nn.vmap(
            MLPContinuousQ,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_critics,
        )(self.hidden_sizes)
        if self.initial_alpha is not None:
            self.log_alpha = self.param("log_alpha", nn.initializers.constant(math.log(self.initial_alpha)), ())

    def actor(self, obs: jax.Array) -> jax.Array:
        """The distribution's inputs ``[B, num_outputs]``."""
        return self.actor_torso(obs.astype(jnp.float32).reshape(obs.shape[0], -1))

    def critics(self, obs: jax.Array, actions: jax.Array) -> jax.Array:
        """``Q_i(s, a)`` of every critic, ``[num_critics, B]``."""
        return self.q(obs, actions)

    def alpha(self) -> jax.Array:
        """The entropy temperature ``exp(log_alpha)`` (SAC)."""
        return jnp.exp(self.log_alpha)

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        inputs = self.actor(obs)
        return inputs, self.critics(obs, jnp.tanh(inputs[:, : self.action_size])).min(axis=0)
