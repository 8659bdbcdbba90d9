"""Recurrent networks: an MLP torso and an LSTM core, then an actor-critic's policy and value
heads or a Q-network's (dueling) Q head.

The core is Hochreiter and Schmidhuber's (1997) LSTM (flax's ``OptimizedLSTMCell``), as in
the recurrent agents of Mnih et al. (2016, A3C), Espeholt et al. (2018, IMPALA) and
Kapturowski et al. (2019, R2D2). One call is one time step of a batch: ``(carry, obs [B, ...])
-> (carry, output)``, the output ``(distribution inputs, value)`` or Q-values ``[B, A]``.
Resetting the carry where an episode starts, and unrolling over a sequence, is the policy's
work (:meth:`~jaxflow.policies.Policy.step`, :meth:`~jaxflow.policies.Policy.unroll`).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxflow.networks.mlp import policy_head, q_head

Carry = tuple[jax.Array, jax.Array]
"""An LSTM's ``(cell, hidden)`` state, each ``[B, lstm_size]``."""


def zero_carry(batch_size: int, lstm_size: int) -> Carry:
    """The carry of ``batch_size`` new episodes: zeros, the state a reset returns to."""
    zeros = jnp.zeros((batch_size, lstm_size), jnp.float32)
    return zeros, zeros


def lstm_torso(
    carry: Carry, obs: jax.Array, hidden_sizes: Sequence[int], lstm_size: int, obs_ndim: int
) -> tuple[Carry, jax.Array]:
    """The shared part, called inside a module's compact ``__call__``: observations (their last
    ``obs_ndim`` axes flattened) through a tanh MLP of ``hidden_sizes`` (orthogonal
    initialisation) and one LSTM step; returns ``(carry, features [B, lstm_size])``."""
    h = obs.astype(jnp.float32).reshape(obs.shape[: obs.ndim - obs_ndim] + (-1,))
    for width in hidden_sizes:
        h = jnp.tanh(nn.Dense(width, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(h))
    return nn.OptimizedLSTMCell(lstm_size)(carry, h)


class LSTMActorCritic(nn.Module):
    """A tanh MLP torso shared by the policy and the value, an LSTM of ``lstm_size`` units, then
    the policy head (small orthogonal initialisation, as :class:`~jaxflow.networks.MLPActorCritic`)
    and a linear value head on the LSTM's output.

    Example:
        >>> net = LSTMActorCritic(2, (32,), lstm_size=8)
        >>> carry = net.initial_carry(3)
        >>> params = net.init(jax.random.PRNGKey(0), carry, jnp.zeros((3, 4)))
        >>> carry, (inputs, value) = net.apply(params, carry, jnp.ones((3, 4)))
        >>> inputs.shape, value.shape, carry[1].shape
        ((3, 2), (3,), (3, 8))
    """

    num_outputs: int
    """The distribution's inputs per observation (``ActionDistribution.num_inputs``)."""
    hidden_sizes: Sequence[int] = (64,)
    lstm_size: int = 64
    obs_ndim: int = 1
    """Trailing axes of an observation, flattened into the first layer's input."""
    num_free_outputs: int = 0
    """Of the outputs, how many are parameters rather than outputs (a Gaussian's log-std)."""

    def initial_carry(self, batch_size: int) -> Carry:
        """The carry of ``batch_size`` new episodes: zeros, the state a reset returns to."""
        return zero_carry(batch_size, self.lstm_size)

    @nn.compact
    def __call__(self, carry: Carry, obs: jax.Array) -> tuple[Carry, tuple[jax.Array, jax.Array]]:
        carry, h = lstm_torso(carry, obs, self.hidden_sizes, self.lstm_size, self.obs_ndim)
        inputs = policy_head(self, h, self.num_outputs, self.num_free_outputs)
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(h)
        return carry, (inputs, value[..., 0])


class LSTMQNetwork(nn.Module):
    """The recurrent Q-network of R2D2 (Kapturowski et al., 2019, "Recurrent Experience Replay
    in Distributed Reinforcement Learning"): the same torso and LSTM as
    :class:`LSTMActorCritic`, then one Q-value per action, dueling if ``dueling``
    (:func:`~jaxflow.networks.mlp.q_head`).

    Example:
        >>> net = LSTMQNetwork(2, (32,), lstm_size=8)
        >>> carry = net.initial_carry(3)
        >>> params = net.init(jax.random.PRNGKey(0), carry, jnp.zeros((3, 4)))
        >>> carry, q = net.apply(params, carry, jnp.ones((3, 4)))
        >>> q.shape, carry[1].shape
        ((3, 2), (3, 8))
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64,)
    lstm_size: int = 64
    obs_ndim: int = 1
    """Trailing axes of an observation, flattened into the first layer's input."""
    dueling: bool = True

    def initial_carry(self, batch_size: int) -> Carry:
        """The carry of ``batch_size`` new episodes: zeros, the state a reset returns to."""
        return zero_carry(batch_size, self.lstm_size)

    @nn.compact
    def __call__(self, carry: Carry, obs: jax.Array) -> tuple[Carry, jax.Array]:
        carry, h = lstm_torso(carry, obs, self.hidden_sizes, self.lstm_size, self.obs_ndim)
        return carry, q_head(h, self.num_actions, 1, self.dueling, lambda features, role: nn.Dense(features))[0]
