"""Distributions over discrete actions: categorical, independent categoricals
(``MultiDiscrete``), and a Q-network's greedy choice; and the masking of illegal actions.

A masked policy (an env with an ``action_mask``) gives its distribution inputs with every
illegal action's logit or Q-value at :data:`MASKED_LOGIT` (:func:`mask_inputs`), so the
distributions here never sample it, give it probability exactly 0 (its ``exp`` underflows)
and a finite entropy, and never pick it greedily; the workers' exploration reads the legal
actions back from the inputs (:func:`legal_inputs`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:  # to_distrax imports it when called: a rollout worker never needs it (0.5 s of its start)
    import distrax

Array = jax.Array

MASKED_LOGIT = -1e9
"""Logit of an action that cannot be taken: finite, so that ``p * log p`` stays 0, not NaN."""


def mask_inputs(inputs: Array, legal: Array | None) -> Array:
    """``inputs [B, A]`` with the illegal actions' entries (``legal`` False) at :data:`MASKED_LOGIT`;
    unchanged where ``legal`` is None (an env without an action mask).

    Example:
        >>> mask_inputs(jnp.array([[2.0, 1.0]]), jnp.array([[False, True]])).tolist()
        [[-1000000000.0, 1.0]]
    """
    return inputs if legal is None else jnp.where(legal, inputs, MASKED_LOGIT)


def legal_inputs(inputs: np.ndarray) -> np.ndarray:
    """Which actions ``inputs [B, A]`` (given by a policy through :func:`mask_inputs`) leave legal:
    every entry above half of :data:`MASKED_LOGIT`, far below any real logit or Q-value."""
    return inputs > MASKED_LOGIT / 2


def identity_action(actions: Any) -> Any:
    """Discrete actions go to the environment as they are."""
    return actions


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
    num_free_inputs: ClassVar[int] = 0

    @property
    def num_inputs(self) -> int:
        return self.num_actions

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
        import distrax

        return distrax.Categorical(logits=inputs)

    to_env = staticmethod(identity_action)


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
class MultiCategorical:
    """Independent categoricals, one per entry of a ``MultiDiscrete`` space's ``nvec``
    (inputs: the logits of each, concatenated, ``[B, sum(nvec)]``; actions ``[B, len(nvec)]``).
    Log-probabilities and entropies are sums over the components.

    Example:
        >>> dist = MultiCategorical((2, 3))
        >>> a, logp = dist.sample_host(np.random.default_rng(0), np.array([[0.0, -1e9, -1e9, 0.0, -1e9]]))
        >>> a.tolist(), np.round(logp, 4).tolist()
        ([[0, 1]], [0.0])
    """

    nvec: tuple[int, ...]
    action_dtype: ClassVar[Any] = np.int32
    num_free_inputs: ClassVar[int] = 0

    @property
    def action_shape(self) -> tuple[int, ...]:
        return (len(self.nvec),)

    @property
    def num_inputs(self) -> int:
        return int(sum(self.nvec))

    def _padded(self, inputs: Array) -> Array:
        """``[B, K, max(nvec)]`` logits, the missing actions of shorter components masked."""
        width, parts, start = max(self.nvec), [], 0
        for n in self.nvec:
            part = inputs[:, start : start + n]
            parts.append(jnp.pad(part, ((0, 0), (0, width - n)), constant_values=MASKED_LOGIT))
            start += n
        return jnp.stack(parts, axis=1)

    def sample(self, key: Array, inputs: Array) -> tuple[Array, Array]:
        actions = jax.random.categorical(key, self._padded(inputs)).astype(jnp.int32)
        return actions, self.log_prob(inputs, actions)

    def log_prob(self, inputs: Array, actions: Array) -> Array:
        return self.to_distrax(inputs).log_prob(actions)

    def entropy(self, inputs: Array) -> Array:
        return self.to_distrax(inputs).entropy()

    def mode(self, inputs: Array) -> Array:
        return jnp.argmax(self._padded(inputs), axis=-1).astype(jnp.int32)

    def sample_host(self, rng: np.random.Generator, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        splits = np.cumsum(self.nvec)[:-1]
        draws = [sample_categorical(rng, part) for part in np.split(inputs, splits, axis=-1)]
        logp = np.sum([lp for _, lp in draws], axis=0, dtype=np.float32)
        return np.stack([a for a, _ in draws], axis=-1), np.asarray(logp)

    def to_distrax(self, inputs: Array) -> distrax.Distribution:
        import distrax

        return distrax.Independent(distrax.Categorical(logits=self._padded(inputs)), 1)

    to_env = staticmethod(identity_action)


@dataclasses.dataclass(frozen=True)
class Greedy:
    """The action of highest value, always (inputs: Q-values ``[B, A]``): a Q-network's own
    policy, of log-probability 0. Value-based algorithms explore around it with their own
    ``explore`` hooks (epsilon-greedy)."""

    num_actions: int
    action_shape: ClassVar[tuple[int, ...]] = ()
    action_dtype: ClassVar[Any] = np.int32
    num_free_inputs: ClassVar[int] = 0

    @property
    def num_inputs(self) -> int:
        return self.num_actions

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
        import distrax

        return distrax.Deterministic(self.mode(inputs))

    to_env = staticmethod(identity_action)
