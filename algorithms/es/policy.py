"""The policy ES and ARS perturb: an MLP from observations to the action distribution's
inputs, with no value head (nothing here learns a value), acted greedily."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp

from jaxflow.config.fields import ConfigError
from jaxflow.policies.distributions import distribution_for
from jaxflow.policies.policy import Policy


class SearchNetwork(nn.Module):
    """tanh MLP (no hidden layers: linear) to ``num_outputs`` inputs; the value is 0.

    Example:
        >>> net = SearchNetwork(2, ())
        >>> params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))
        >>> jax.tree.map(jnp.shape, params)["params"]["Dense_0"]["kernel"]
        (4, 2)
    """

    num_outputs: int
    hidden_sizes: Sequence[int] = ()

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = obs.astype(jnp.float32).reshape(obs.shape[0], -1)
        for width in self.hidden_sizes:
            h = jnp.tanh(nn.Dense(width)(h))
        # A zero output layer: theta = 0 is the first mean, and the perturbations alone decide
        # the first generation's actions (ARS starts from the zero matrix, Mania et al. Alg. 2).
        out = nn.Dense(self.num_outputs, kernel_init=nn.initializers.zeros)(h)
        return out, jnp.zeros(out.shape[:1], out.dtype)


def search_policy(config: Any, obs_space: gymnasium.Space, action_space: gymnasium.Space) -> Policy:
    """ES's and ARS's policy for the env's spaces: ``Discrete`` acted by the argmax of the
    outputs, a ``Box`` by their tanh rescaled to its bounds (``Deterministic``)."""
    if config.model:
        raise ConfigError(f"{type(config).__name__}.model: ES and ARS perturb their own MLP; set hidden_sizes instead.")
    distribution = distribution_for(action_space, "deterministic")
    obs_shape = tuple(obs_space.shape or ())
    return Policy(SearchNetwork(distribution.num_inputs, tuple(config.hidden_sizes)), distribution, obs_shape)
