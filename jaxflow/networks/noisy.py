"""Noisy linear layers with factorised Gaussian noise (Fortunato et al., 2018, "Noisy Networks
for Exploration", Section 3.2), the exploration of Rainbow (Hessel et al., 2018).

A :class:`NoisyDense` draws its noise from the ``"noise"`` rng stream of the call: a policy
acting with a key (``Policy.apply(params, obs, key)``) explores with fresh noise on each call,
and a call without one (greedy evaluation, export) uses the mean weights ``mu`` alone.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array

NOISE_RNG = "noise"
"""The flax rng stream the noisy layers draw from."""

DEFAULT_SIGMA0 = 0.5
"""The paper's sigma_0 for factorised noise: ``sigma`` starts at ``sigma_0 / sqrt(fan_in)``."""


def signed_sqrt(x: Array) -> Array:
    """``f(x) = sign(x) sqrt(|x|)``, the paper's transform of factorised noise.

    Example:
        >>> signed_sqrt(jnp.array([-4.0, 0.0, 9.0])).tolist()
        [-2.0, 0.0, 3.0]
    """
    return jnp.sign(x) * jnp.sqrt(jnp.abs(x))


def factorised_noise(key: Array, fan_in: int, fan_out: int) -> tuple[Array, Array]:
    """``(eps_w [fan_in, fan_out], eps_b [fan_out])`` of one draw: ``p + q`` unit Gaussians
    instead of ``p q``, ``eps_w = f(e_in) f(e_out)^T`` and ``eps_b = f(e_out)``."""
    k_in, k_out = jax.random.split(key)
    e_in = signed_sqrt(jax.random.normal(k_in, (fan_in,)))
    e_out = signed_sqrt(jax.random.normal(k_out, (fan_out,)))
    return jnp.outer(e_in, e_out), e_out


class NoisyDense(nn.Module):
    """``y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b`` with factorised noise
    (:func:`factorised_noise`), one draw per call shared by the batch; ``y = mu_w x + mu_b``
    when the call has no ``"noise"`` rng.

    Example:
        >>> layer = NoisyDense(2)
        >>> params = layer.init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
        >>> sorted(params["params"])
        ['mu_b', 'mu_w', 'sigma_b', 'sigma_w']
    """

    features: int
    sigma0: float = DEFAULT_SIGMA0

    @nn.compact
    def __call__(self, x: Array) -> Array:
        fan_in = x.shape[-1]
        bound = 1.0 / jnp.sqrt(fan_in)

        def uniform(key: Array, shape: tuple[int, ...]) -> Array:
            return jax.random.uniform(key, shape, jnp.float32, -bound, bound)

        def constant(key: Array, shape: tuple[int, ...]) -> Array:
            del key
            return jnp.full(shape, self.sigma0 * bound, jnp.float32)

        mu_w = self.param("mu_w", uniform, (fan_in, self.features))
        mu_b = self.param("mu_b", uniform, (self.features,))
        sigma_w = self.param("sigma_w", constant, (fan_in, self.features))
        sigma_b = self.param("sigma_b", constant, (self.features,))
        if not self.has_rng(NOISE_RNG):
            return x @ mu_w + mu_b
        eps_w, eps_b = factorised_noise(self.make_rng(NOISE_RNG), fan_in, self.features)
        return x @ (mu_w + sigma_w * eps_w) + mu_b + sigma_b * eps_b
