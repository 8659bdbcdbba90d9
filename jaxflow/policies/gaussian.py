"""Distributions over continuous (``Box``) actions: a diagonal Gaussian (on-policy
algorithms), a tanh-squashed Gaussian (SAC) and a deterministic tanh actor (TD3, DDPG).

Each acts in the *normalized* action space ``[-1, 1]^A``; :meth:`to_env` maps an action to
the Box's bounds only where it enters the environment, so what a worker stores and a loss
scores is the sample itself (for the Gaussian: unclipped). Log-std inputs are clipped to
``[LOG_STD_MIN, LOG_STD_MAX]``, SAC's range (Haarnoja et al., 2018).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:  # to_distrax imports it when called: a rollout worker never needs it (0.5 s of its start)
    import distrax

Array = jax.Array

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
LOG_2PI = math.log(2.0 * math.pi)
SQUASH_EPS = 1e-6
"""How far inside ``(-1, 1)`` a squashed action is kept before ``atanh``."""


def _xp(x: Any) -> Any:
    """``jax.numpy`` for JAX arrays (and tracers), ``numpy`` for host arrays."""
    return jnp if isinstance(x, jax.Array) else np


@dataclasses.dataclass(frozen=True)
class BoxBounds:
    """A ``Box``'s finite bounds, and the map from ``[-1, 1]`` onto them."""

    low: tuple[float, ...]
    high: tuple[float, ...]

    def to_env(self, actions: Any) -> Any:
        """``low + (clip(a, -1, 1) + 1) * (high - low) / 2``, in numpy or JAX as ``actions`` is."""
        xp = _xp(actions)
        low, high = xp.asarray(self.low, xp.float32), xp.asarray(self.high, xp.float32)
        return low + (xp.clip(actions, -1.0, 1.0) + 1.0) * 0.5 * (high - low)


def split_gaussian(inputs: Any) -> tuple[Any, Any]:
    """``[B, 2A]`` inputs -> ``(mean [B, A], log_std [B, A])``, the log-std clipped."""
    xp, half = _xp(inputs), inputs.shape[-1] // 2
    return inputs[..., :half], xp.clip(inputs[..., half:], LOG_STD_MIN, LOG_STD_MAX)


def gaussian_log_prob(mean: Any, log_std: Any, x: Any) -> Any:
    """``log N(x; mean, diag(exp(log_std)^2))``, summed over the last axis (numpy or JAX)."""
    z = (x - mean) / _xp(x).exp(log_std)
    return -0.5 * (z * z + 2.0 * log_std + LOG_2PI).sum(axis=-1)


def tanh_log_det(u: Any) -> Any:
    """``sum log(1 - tanh(u)^2)`` over the last axis, as ``2 (log 2 - u - softplus(-2u))``,
    which stays finite where ``tanh(u)`` rounds to ±1."""
    xp = _xp(u)
    softplus = jax.nn.softplus(-2.0 * u) if xp is jnp else np.logaddexp(0.0, -2.0 * u)
    return (2.0 * (math.log(2.0) - u - softplus)).sum(axis=-1)


@dataclasses.dataclass(frozen=True)
class Gaussian:
    """``a ~ N(mean, diag(std^2))``, unbounded; the environment gets ``a`` clipped to
    ``[-1, 1]`` and rescaled (inputs: ``[B, 2A]`` means then log-stds).

    With ``state_dependent_std`` false (the default, as in PPO's paper) the log-stds are
    ``num_free_inputs`` parameters of the network, not functions of the observation.

    Example:
        >>> dist = Gaussian(BoxBounds((-2.0,), (2.0,)))
        >>> a, logp = dist.sample_host(np.random.default_rng(0), np.array([[0.5, -30.0]]))
        >>> np.round(a, 6).tolist(), dist.to_env(np.array([0.5])).tolist()
        ([[0.5]], [1.0])
    """

    bounds: BoxBounds
    state_dependent_std: bool = False
    action_dtype: ClassVar[Any] = np.float32

    @property
    def action_shape(self) -> tuple[int, ...]:
        return (len(self.bounds.low),)

    @property
    def num_inputs(self) -> int:
        return 2 * len(self.bounds.low)

    @property
    def num_free_inputs(self) -> int:
        return 0 if self.state_dependent_std else len(self.bounds.low)

    def sample(self, key: Array, inputs: Array) -> tuple[Array, Array]:
        mean, log_std = split_gaussian(inputs)
        actions = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
        return actions, gaussian_log_prob(mean, log_std, actions)

    def log_prob(self, inputs: Array, actions: Array) -> Array:
        return self.to_distrax(inputs).log_prob(actions)

    def entropy(self, inputs: Array) -> Array:
        return self.to_distrax(inputs).entropy()

    def mode(self, inputs: Array) -> Array:
        return split_gaussian(inputs)[0]

    def sample_host(self, rng: np.random.Generator, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, log_std = split_gaussian(inputs)
        actions = (mean + np.exp(log_std) * rng.standard_normal(mean.shape)).astype(np.float32)
        return actions, gaussian_log_prob(mean, log_std, actions).astype(np.float32)

    def to_distrax(self, inputs: Array) -> distrax.Distribution:
        import distrax

        mean, log_std = split_gaussian(inputs)
        return distrax.MultivariateNormalDiag(mean, jnp.exp(log_std))

    def to_env(self, actions: Any) -> Any:
        return self.bounds.to_env(actions)


@dataclasses.dataclass(frozen=True)
class SquashedGaussian:
    """``a = tanh(u)``, ``u ~ N(mean, diag(std^2))`` (inputs: ``[B, 2A]`` means then
    state-dependent log-stds): SAC's policy. Log-probabilities carry the change of
    variables, ``log p(a) = log N(u) - sum log(1 - tanh(u)^2)``; :meth:`sample` is
    reparameterized, so a loss can differentiate through it.

    ``entropy`` has no closed form; it returns the Gaussian's entropy plus the log-det at the
    mean, a first-order estimate (SAC itself uses ``-log p`` of samples).
    """

    bounds: BoxBounds
    action_dtype: ClassVar[Any] = np.float32
    num_free_inputs: ClassVar[int] = 0

    @property
    def action_shape(self) -> tuple[int, ...]:
        return (len(self.bounds.low),)

    @property
    def num_inputs(self) -> int:
        return 2 * len(self.bounds.low)

    def sample(self, key: Array, inputs: Array) -> tuple[Array, Array]:
        mean, log_std = split_gaussian(inputs)
        u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
        return jnp.tanh(u), gaussian_log_prob(mean, log_std, u) - tanh_log_det(u)

    def log_prob(self, inputs: Array, actions: Array) -> Array:
        mean, log_std = split_gaussian(inputs)
        u = jnp.arctanh(jnp.clip(actions, -1.0 + SQUASH_EPS, 1.0 - SQUASH_EPS))
        return gaussian_log_prob(mean, log_std, u) - tanh_log_det(u)

    def entropy(self, inputs: Array) -> Array:
        mean, log_std = split_gaussian(inputs)
        return (log_std + 0.5 * (1.0 + LOG_2PI)).sum(axis=-1) + tanh_log_det(mean)

    def mode(self, inputs: Array) -> Array:
        return jnp.tanh(split_gaussian(inputs)[0])

    def sample_host(self, rng: np.random.Generator, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, log_std = split_gaussian(inputs)
        u = mean + np.exp(log_std) * rng.standard_normal(mean.shape)
        logp = gaussian_log_prob(mean, log_std, u) - tanh_log_det(u)
        return np.tanh(u).astype(np.float32), logp.astype(np.float32)

    def to_distrax(self, inputs: Array) -> distrax.Distribution:
        import distrax

        mean, log_std = split_gaussian(inputs)
        base = distrax.MultivariateNormalDiag(mean, jnp.exp(log_std))
        return distrax.Transformed(base, distrax.Block(distrax.Tanh(), ndims=1))

    def to_env(self, actions: Any) -> Any:
        return self.bounds.to_env(actions)


@dataclasses.dataclass(frozen=True)
class Deterministic:
    """``a = tanh(inputs)``, always, of log-probability 0 (inputs: ``[B, A]``): TD3's and
    DDPG's actor. Those algorithms explore with their own ``explore`` hooks (Gaussian noise)."""

    bounds: BoxBounds
    action_dtype: ClassVar[Any] = np.float32
    num_free_inputs: ClassVar[int] = 0

    @property
    def action_shape(self) -> tuple[int, ...]:
        return (len(self.bounds.low),)

    @property
    def num_inputs(self) -> int:
        return len(self.bounds.low)

    def sample(self, key: Array, inputs: Array) -> tuple[Array, Array]:
        del key
        return self.mode(inputs), jnp.zeros(inputs.shape[:1], jnp.float32)

    def log_prob(self, inputs: Array, actions: Array) -> Array:
        del actions
        return jnp.zeros(inputs.shape[:1], jnp.float32)

    def entropy(self, inputs: Array) -> Array:
        return jnp.zeros(inputs.shape[:1], jnp.float32)

    def mode(self, inputs: Array) -> Array:
        return jnp.tanh(inputs)

    def sample_host(self, rng: np.random.Generator, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        del rng
        return np.tanh(inputs).astype(np.float32), np.zeros(inputs.shape[0], np.float32)

    def to_distrax(self, inputs: Array) -> distrax.Distribution:
        import distrax

        return distrax.Independent(distrax.Deterministic(self.mode(inputs)), 1)

    def to_env(self, actions: Any) -> Any:
        return self.bounds.to_env(actions)
