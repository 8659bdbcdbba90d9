"""The policy: a network plus an action distribution, and every way of acting with them.

Rollout workers, the learner's losses, device mode, evaluation and multi-agent runs all
act through a :class:`Policy`. Its network maps observations to *distribution inputs*
``[B, D]`` and a value ``[B]`` (:func:`actor_critic_outputs`), or to Q-values that the policy
reads as inputs and ``max_a Q`` (:func:`q_value_outputs`); its distribution
(:mod:`jaxflow.policies.distributions`) turns the inputs into actions.

A masked policy (``action_mask`` set: the env gives its legal actions as the last entries of
every observation, :mod:`jaxflow.envs.masking`) masks its distribution inputs in :meth:`Policy.apply`,
so everything that acts or learns through the policy sees illegal actions at
:data:`~jaxflow.policies.categorical.MASKED_LOGIT`: workers' sampling and exploration, losses,
greedy evaluation, and a Q-policy's ``max_a Q`` over legal actions only.

A recurrent policy is the same object with ``recurrent`` set: its network is one time step
``(state, obs) -> (state, output)`` and has ``initial_carry(batch_size)``
(:class:`~jaxflow.networks.recurrent.LSTMActorCritic`, or a user's model: the state any pytree
of ``[B, ...]`` arrays, :mod:`jaxflow.networks.models`). :meth:`Policy.step` acts one step,
the state first reset to ``initial_carry``'s where an episode starts; :meth:`Policy.unroll` scans ``step``
over a time-major ``[T, B]`` sequence from a stored start state. A feed-forward policy's
state is ``None``; acting code passes the state along without looking inside.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxflow.networks.noisy import NOISE_RNG
from jaxflow.policies.categorical import Categorical, Greedy, mask_inputs
from jaxflow.policies.distributions import ActionDistribution

Array = jax.Array

NOISE_STREAM = 0x6E6F6973
"""Folded into an acting key for a noisy policy's noise, apart from the key's other uses."""


def actor_critic_outputs(out: tuple[Array, Array], legal: Array | None = None) -> tuple[Array, Array]:
    """An actor-critic network already returns ``(distribution inputs, value)``; the logits of
    illegal actions are masked where ``legal [B, A]`` is given."""
    inputs, value = out
    return mask_inputs(inputs, legal), value


def q_value_outputs(q: Array, legal: Array | None = None) -> tuple[Array, Array]:
    """A Q-network's ``[B, A]`` values as a policy reads them: the inputs of its greedy
    distribution, and the greedy value ``max_a Q(s, a)`` (what a truncated episode bootstraps
    from). Where ``legal [B, A]`` is given, illegal actions' values are masked and the max is
    over legal ones; a state with none (the last of a finished game) is worth 0."""
    q = mask_inputs(q, legal)
    if legal is None:
        return q, q.max(axis=-1)
    return q, jnp.where(legal.any(axis=-1), q.max(axis=-1), 0.0)


def pack(inputs: Array, value: Array) -> Array:
    """``[B, D + 1]``: distribution inputs then value, one array for one transfer (see :func:`unpack`)."""
    return jnp.concatenate([inputs.reshape(inputs.shape[0], -1), value[:, None]], axis=-1)


@dataclasses.dataclass(frozen=True)
class Policy:
    """A network, how to read its output, and an action distribution.

    Example:
        >>> policy = Policy(MLPActorCritic(2), Categorical(2), obs_shape=(4,))  # doctest: +SKIP
        >>> params = policy.init(jax.random.PRNGKey(0))                          # doctest: +SKIP
        >>> actions, logp, inputs, value = policy.act(key, params, obs)         # doctest: +SKIP
    """

    network: nn.Module
    distribution: ActionDistribution
    obs_shape: tuple[int, ...]
    outputs: Callable[[Any, Array | None], tuple[Array, Array]] = actor_critic_outputs
    """Reads the network's output and the legal actions (None: all) as ``(distribution inputs, value)``."""
    action_mask: bool = False
    """Whether the last ``distribution.num_inputs`` entries of an observation are the env's
    action mask (1: legal), applied to the distribution inputs (a ``Categorical`` or ``Greedy``)."""
    recurrent: bool = False
    """Whether acting carries a state from step to step (see :meth:`initial_state`)."""
    noisy: bool = False
    """Whether the network has noisy layers (:class:`~jaxflow.networks.noisy.NoisyDense`): acting
    passes a key and gets fresh noise on each call; greedy play passes none and uses the mean weights."""
    inputs_method: str | None = None
    """The network's method giving the distribution inputs alone (``"actor"``), for algorithms
    whose rollouts read no value on their steps (SAC, TD3): a rollout worker's steps then skip
    the value (the critics), and a truncated episode still bootstraps from :meth:`apply`'s."""

    def __post_init__(self) -> None:
        if self.action_mask and not isinstance(self.distribution, Categorical | Greedy):
            raise TypeError(
                f"an action mask applies to one Discrete action (Categorical or Greedy), not to {self.distribution}"
            )

    def init(self, key: Array) -> Any:
        """Fresh parameters for one observation's shape."""
        obs = jnp.zeros((1, *self.obs_shape), jnp.float32)
        if self.recurrent:
            return self.network.init(key, self.initial_state(1), obs)
        return self.network.init(key, obs)

    def apply(self, params: Any, obs: Array, key: Array | None = None) -> tuple[Array, Array]:
        """``(distribution inputs [B, D], value [B])``: what losses call as ``apply_fn``; ``key``
        draws a noisy network's noise (None: its mean weights). A recurrent policy acts
        through :meth:`step` and :meth:`unroll` instead."""
        if self.recurrent:
            raise TypeError("a recurrent policy acts with step(params, state, obs, episode_starts), not apply")
        return self.outputs(self.network_outputs(params, obs, key), self.legal_actions(obs))

    def network_outputs(self, params: Any, obs: Array, key: Array | None = None) -> Any:
        """The network's own output (a distributional Q-network's ``[B, A, N]``), noise drawn from ``key``."""
        if key is None:
            return self.network.apply(params, obs)
        return self.network.apply(params, obs, rngs={NOISE_RNG: key})

    def noise_key(self, key: Array) -> Array | None:
        """The key a noisy policy acts with, apart from ``key``'s own uses (None: not noisy)."""
        return jax.random.fold_in(key, NOISE_STREAM) if self.noisy else None

    def legal_actions(self, obs: Array) -> Array | None:
        """``[B, A]`` True where an action is legal, read from the observations' mask (None:
        the policy is not masked, every action is legal)."""
        if not self.action_mask:
            return None
        return obs[:, -self.distribution.num_inputs :] > 0.5  # the flat mask holds 1.0 (legal) or 0.0

    def act(self, key: Array, params: Any, obs: Array) -> tuple[Array, Array, Array, Array]:
        """Samples actions in JAX: ``(actions, log-probabilities, distribution inputs, values)``."""
        inputs, value = self.apply(params, obs, self.noise_key(key))
        actions, logp = self.distribution.sample(key, inputs)
        return actions, logp, inputs, value

    def greedy(self, params: Any, obs: Array) -> Array:
        """The distribution's most likely action per observation (evaluation)."""
        inputs, _ = self.apply(params, obs)
        return self.distribution.mode(inputs)

    def forward_packed(self, params: Any, obs: Array, key: Array | None = None) -> Array:
        """``[B, D + 1]``: the distribution inputs, then the value, as one array, so that a
        rollout worker's step costs one compiled call and one transfer to the host."""
        return pack(*self.apply(params, obs, key))

    def inputs_packed(self, params: Any, obs: Array) -> Array:
        """:meth:`forward_packed`'s layout with a value of 0, from :attr:`inputs_method` alone."""
        inputs: Array = self.network.apply(params, obs, method=self.inputs_method)  # type: ignore[assignment]
        return pack(inputs, jnp.zeros(inputs.shape[:1], inputs.dtype))

    def sample_host(self, rng: np.random.Generator, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Samples actions in numpy from distribution inputs on the host (rollout workers)."""
        return self.distribution.sample_host(rng, inputs)

    def initial_state(self, batch_size: int) -> Any:
        """The carry of a recurrent policy for ``batch_size`` new episodes (None: feed-forward)."""
        return self.network.initial_carry(batch_size) if self.recurrent else None

    def reset_state(self, state: Any, episode_starts: Array) -> Any:
        """``state`` with the rows of newly started episodes (``episode_starts [B]`` True) set
        to :meth:`initial_state`'s (None stays None: feed-forward)."""
        if state is None:
            return None
        initial = self.initial_state(episode_starts.shape[0])
        return jax.tree.map(
            lambda s, z: jnp.where(episode_starts.reshape((-1,) + (1,) * (s.ndim - 1)), z, s), state, initial
        )

    def step(
        self, params: Any, state: Any, obs: Array, episode_starts: Array, key: Array | None = None
    ) -> tuple[Any, Array, Array]:
        """One step of a recurrent policy: ``(next state, distribution inputs [B, D], value [B])``
        for observations ``obs [B, ...]``, the state reset where ``episode_starts [B]`` (the
        observation is an episode's first) before the network reads it."""
        state = self.reset_state(state, episode_starts)
        rngs = {} if key is None else {NOISE_RNG: key}
        state, out = self.network.apply(params, state, obs, rngs=rngs)
        inputs, value = self.outputs(out, self.legal_actions(obs))
        return state, inputs, value

    def step_packed(self, params: Any, state: Any, obs: Array, episode_starts: Array) -> tuple[Any, Array]:
        """:meth:`step` with its output as :meth:`forward_packed`'s one ``[B, D + 1]`` array:
        a rollout worker's step of a recurrent policy, one compiled call whose new state stays
        on the device for the next."""
        state, inputs, value = self.step(params, state, obs, episode_starts)
        return state, pack(inputs, value)

    def unroll(self, params: Any, state: Any, obs: Array, episode_starts: Array) -> tuple[Any, Array, Array]:
        """:meth:`step` scanned over time-major ``obs [T, B, ...]`` and ``episode_starts [T, B]``
        from ``state`` (the state before the first step): ``(final state, inputs [T, B, D], values [T, B])``."""

        def one(s: Any, x: tuple[Array, Array]) -> tuple[Any, tuple[Array, Array]]:
            s, inputs, value = self.step(params, s, *x)
            return s, (inputs, value)

        state, (inputs, values) = jax.lax.scan(one, state, (obs, episode_starts))
        return state, inputs, values

    def greedy_step(self, params: Any, state: Any, obs: Array) -> tuple[Any, Array]:
        """A recurrent policy's greedy actions within its episodes: ``(next state, actions)``."""
        state, inputs, _ = self.step(params, state, obs, jnp.zeros(obs.shape[0], bool))
        return state, self.distribution.mode(inputs)

    def value_after(self, params: Any, state: Any, obs: Array) -> Array:
        """``V(obs) [B]`` given the state reached before ``obs`` in the same episode (a
        recurrent policy's bootstrap values), or the feed-forward value."""
        if not self.recurrent:
            return self.apply(params, obs)[1]
        return self.step(params, state, obs, jnp.zeros(obs.shape[0], bool))[2]


def compiled_forward(policy: Policy, seed: int) -> Callable[..., Any]:
    """The compiled :meth:`Policy.forward_packed` a rollout worker acts with: a noisy policy's
    noise is drawn afresh on every call (the call's count folded into a key of ``seed``), so
    it is resampled on every step. A recurrent policy's is :meth:`Policy.step_packed`,
    ``(params, state, obs, episode_starts) -> (state, packed)``."""
    if policy.recurrent:
        return jax.jit(policy.step_packed)
    if not policy.noisy:
        return jax.jit(policy.forward_packed)
    key = jax.random.fold_in(jax.random.PRNGKey(seed), NOISE_STREAM)
    forward = jax.jit(lambda params, obs, step: policy.forward_packed(params, obs, jax.random.fold_in(key, step)))
    steps = itertools.count()
    return lambda params, obs: forward(params, obs, next(steps))


def compiled_acting(policy: Policy, forward: Callable[..., Any]) -> Callable[..., Any]:
    """What a rollout worker steps with: :meth:`Policy.inputs_packed`, compiled, where the
    policy has an :attr:`~Policy.inputs_method`; otherwise ``forward`` (:func:`compiled_forward`'s)."""
    if policy.inputs_method is None or policy.recurrent or policy.noisy:
        return forward
    return jax.jit(policy.inputs_packed)


def unpack(packed: Any) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`Policy.forward_packed`'s ``[B, D + 1]`` output -> host ``(inputs [B, D], values [B])``."""
    out = np.asarray(packed)
    return out[:, :-1], out[:, -1]
