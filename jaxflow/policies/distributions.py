"""Action distributions: how a policy turns its network's output into actions.

A distribution takes the network's *distribution inputs* for a batch, ``[B, D]`` (logits
for a categorical), and gives what each user of a policy needs: samples and their
log-probabilities in JAX (device mode, losses), the same samples drawn in numpy on a
rollout worker's host, the greedy action (evaluation), entropy, and a ``distrax``
distribution for anything else a loss wants. Gaussian, squashed Gaussian,
multi-categorical and masked distributions are further classes with these methods.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Protocol

import distrax
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


class ActionDistribution(Protocol):
    """What acting, learning and evaluation need of a policy's action distribution.

    ``sample_host`` draws from the same distribution as ``sample``, in numpy: on a rollout
    worker's CPU, drawing with JAX's counter-based PRNG inside the compiled policy costs
    more than the network itself, so workers sample on the host.
    """

    @property
    def action_shape(self) -> tuple[int, ...]:
        """Shape of one action (``()`` for a discrete action)."""
        ...

    @property
    def action_dtype(self) -> Any:
        """Numpy dtype of an action."""
        ...

    def sample(self, key: Array, inputs: Array) -> tuple[Array, Array]:
        """Actions ``[B, *action_shape]`` and their log-probabilities ``[B]`` (JAX)."""
        ...

    def log_prob(self, inputs: Array, actions: Array) -> Array:
        """Log-probabilities ``[B]`` of ``actions`` (JAX)."""
        ...

    def entropy(self, inputs: Array) -> Array:
        """Entropies ``[B]`` (JAX)."""
        ...

    def mode(self, inputs: Array) -> Array:
        """The most likely actions (JAX): what a greedy evaluation plays."""
        ...

    def sample_host(self, rng: np.random.Generator, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``sample`` in numpy, on the host."""
        ...

    def to_distrax(self, inputs: Array) -> distrax.Distribution:
        """The distribution as a ``distrax`` object."""
        ...


@dataclasses.dataclass(frozen=True)
class Categorical:
    """``a ~ softmax(logits)`` over ``num_actions`` discrete actions (inputs: logits ``[B, A]``).

    Example:
        >>> dist = Categorical(3)
        >>> a, logp = dist.sample_host(np.random.default_rng(0), np.log(np.array([[0.0, 1.0, 0.0]]) + 1e-30))
        >>> a.tolist(), np.round(logp, 4).tolist()
        ([1], [0.0])
    """

    num_actions: int
    action_shape: ClassVar[tuple[int, ...]] = ()
    action_dtype: ClassVar[Any] = np.int32

    def sample(self, key: Array, inputs: Array) -> tuple[Array, Array]:
        actions = jax.random.categorical(key, inputs).astype(jnp.int32)
        return actions, self.log_prob(inputs, actions)

    def log_prob(self, inputs: Array, actions: Array) -> Array:
        return jnp.take_along_axis(jax.nn.log_softmax(inputs), actions[:, None], axis=-1)[:, 0]

    def entropy(self, inputs: Array) -> Array:
        return self.to_distrax(inputs).entropy()

    def mode(self, inputs: Array) -> Array:
        return jnp.argmax(inputs, axis=-1).astype(jnp.int32)

    def sample_host(self, rng: np.random.Generator, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return sample_categorical(rng, inputs)

    def to_distrax(self, inputs: Array) -> distrax.Distribution:
        return distrax.Categorical(logits=inputs)


def sample_categorical(rng: np.random.Generator, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Samples ``a ~ softmax(logits)`` per row by the Gumbel-max trick; returns ``(a, log p(a))``.

    Done in numpy on the host: drawing the noise with JAX's counter-based PRNG
    inside the jitted policy costs more than the network itself on a CPU.
    """
    actions = np.argmax(logits + rng.gumbel(size=logits.shape), axis=-1).astype(np.int32)
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return actions, np.take_along_axis(logp, actions[:, None], axis=-1)[:, 0].astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Greedy:
    """The action of highest value, always (inputs: Q-values ``[B, A]``): a Q-network's own
    policy, of log-probability 0. Value-based algorithms explore around it with their own
    ``explore`` hooks (epsilon-greedy)."""

    num_actions: int
    action_shape: ClassVar[tuple[int, ...]] = ()
    action_dtype: ClassVar[Any] = np.int32

    def sample(self, key: Array, inputs: Array) -> tuple[Array, Array]:
        del key
        actions = self.mode(inputs)
        return actions, jnp.zeros(actions.shape, jnp.float32)

    def log_prob(self, inputs: Array, actions: Array) -> Array:
        return jnp.where(actions == self.mode(inputs), 0.0, -jnp.inf)

    def entropy(self, inputs: Array) -> Array:
        return jnp.zeros(inputs.shape[:1], jnp.float32)

    def mode(self, inputs: Array) -> Array:
        return jnp.argmax(inputs, axis=-1).astype(jnp.int32)

    def sample_host(self, rng: np.random.Generator, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        del rng
        return inputs.argmax(axis=-1).astype(np.int32), np.zeros(inputs.shape[0], np.float32)

    def to_distrax(self, inputs: Array) -> distrax.Distribution:
        return distrax.Deterministic(self.mode(inputs))


def distribution_for(action_space: Any) -> ActionDistribution:
    """The action distribution of a policy acting in ``action_space`` (a gymnasium space):
    categorical for ``Discrete``. Other spaces raise ``TypeError`` naming what is supported."""
    import gymnasium

    if isinstance(action_space, gymnasium.spaces.Discrete):
        return Categorical(int(action_space.n))
    raise TypeError(f"no action distribution for {action_space}; supported: Discrete (categorical)")
