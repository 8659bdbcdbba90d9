"""A recurrent actor-critic: an MLP torso, an LSTM core, and the policy and value heads.

The core is Hochreiter and Schmidhuber's (1997) LSTM (flax's ``OptimizedLSTMCell``), as in
the recurrent agents of Mnih et al. (2016, A3C) and Espeholt et al. (2018, IMPALA). One call is
one time step of a batch: ``(carry, obs [B, ...]) -> (carry, (distribution inputs, value))``.
Resetting the carry where an episode starts, and unrolling over a sequence, is the policy's
work (:meth:`~jaxflow.policies.Policy.step`, :meth:`~jaxflow.policies.Policy.unroll`).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxflow.networks.mlp import policy_head

Carry = tuple[jax.Array, jax.Array]
"""An LSTM's ``(cell, hidden)`` state, each ``[B, lstm_size]``."""


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
        zeros = jnp.zeros((batch_size, self.lstm_size), jnp.float32)
        return zeros, zeros

    @nn.compact
    def __call__(self, carry: Carry, obs: jax.Array) -> tuple[Carry, tuple[jax.Array, jax.Array]]:
        h = obs.astype(jnp.float32).reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,))
        for width in self.hidden_sizes:
            h = jnp.tanh(nn.Dense(width, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(h))
        carry, h = nn.OptimizedLSTMCell(self.lstm_size)(carry, h)
        inputs = policy_head(self, h, self.num_outputs, self.num_free_outputs)
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(h)
        return carry, (inputs, value[..., 0])
