"""Recurrent models of a user's own, for the tests of ``model=...`` with ``use_lstm=True``:
not jaxflow's LSTM, and a carry that is one array rather than the LSTM's pair.

Ray actors get this module's code with the policy (``dataflow.actors.ship_by_value``), so
their processes need no ``tests`` on their path.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class GRUActorCritic(nn.Module):
    """A tanh layer, flax's GRU cell (Cho et al., 2014) of ``size`` units, then a policy and a
    value head; its carry is the GRU's hidden state alone, ``[B, size]``."""

    num_outputs: int
    size: int = 8
    width: int = 16

    def initial_carry(self, batch_size: int) -> jax.Array:
        return jnp.zeros((batch_size, self.size), jnp.float32)

    @nn.compact
    def __call__(self, carry: jax.Array, obs: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        carry, h = nn.GRUCell(self.size)(carry, jnp.tanh(nn.Dense(self.width)(obs)))
        logits = nn.Dense(self.num_outputs, kernel_init=nn.initializers.orthogonal(0.01))(h)
        return carry, (logits, nn.Dense(1)(h)[..., 0])


class GrowingCarry(GRUActorCritic):
    """Wrong: one step returns a carry one unit wider than the one it took."""

    @nn.compact
    def __call__(self, carry: jax.Array, obs: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        carry, (logits, value) = GRUActorCritic(self.num_outputs, self.size, self.width)(carry, obs)
        return jnp.concatenate([carry, value[:, None]], axis=-1), (logits, value)
