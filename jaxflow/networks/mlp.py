"""Multi-layer perceptrons for flat observations: an actor-critic and a Q-network."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxflow.networks.noisy import DEFAULT_SIGMA0, NoisyDense


def policy_head(module: nn.Module, h: jax.Array, num_outputs: int, num_free_outputs: int = 0) -> jax.Array:
    """A policy's distribution inputs ``[*batch, num_outputs]`` from features ``h``: a dense
    layer of small orthogonal initialisation (near-uniform / near-zero-mean first actions),
    then ``num_free_outputs`` parameters of ``module`` that do not depend on the observation
    (a Gaussian's state-independent log-std, initialised to 0), broadcast over the batch."""
    out = nn.Dense(num_outputs - num_free_outputs, kernel_init=nn.initializers.orthogonal(0.01))(h)
    if num_free_outputs:
        free = module.param("free_inputs", nn.initializers.zeros, (num_free_outputs,))
        out = jnp.concatenate([out, jnp.broadcast_to(free, (*out.shape[:-1], num_free_outputs))], axis=-1)
    return out


class MLPActorCritic(nn.Module):
    """Separate tanh MLPs for the policy's distribution inputs and the state value.

    Orthogonal initialisation with a small policy head, as in the PPO
    implementation study (Andrychowicz et al., 2021, "What Matters in On-Policy RL").
    """

    num_outputs: int
    """The distribution's inputs per observation (``ActionDistribution.num_inputs``)."""
    hidden_sizes: Sequence[int] = (64, 64)
    obs_ndim: int = 1
    """Trailing axes of an observation, flattened into the first layer's input (3 for MinAtar's [10, 10, 4])."""
    num_free_outputs: int = 0
    """Of those, how many are parameters rather than outputs (``ActionDistribution.num_free_inputs``)."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = obs.astype(jnp.float32).reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,))

        def torso(h: jax.Array) -> jax.Array:
            for width in self.hidden_sizes:
                h = jnp.tanh(nn.Dense(width, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(h))
            return h

        inputs = policy_head(self, torso(x), self.num_outputs, self.num_free_outputs)
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(torso(x))
        return inputs, value[..., 0]


class MLPQNetwork(nn.Module):
    """A ReLU MLP with one Q-value per action, optionally with a dueling head.

    Dueling (Wang et al., 2016, "Dueling Network Architectures for Deep Reinforcement
    Learning"): ``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)``. Returns the Q-values
    ``[B, A]``; a :class:`~jaxflow.policies.Policy` with
    :func:`~jaxflow.policies.q_value_outputs` reads them as greedy distribution inputs and
    ``max_a Q`` as the value.

    With ``num_atoms > 1`` it returns a distribution per action, ``[B, A, num_atoms]`` (C51's
    logits or QR-DQN's quantiles; dueling then combines atom by atom, as in Rainbow), read by
    :func:`~jaxflow.policies.categorical_q_outputs` or :func:`~jaxflow.policies.quantile_q_outputs`.
    With ``noisy`` every layer is a :class:`~jaxflow.networks.noisy.NoisyDense`.
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    dueling: bool = True
    num_atoms: int = 1
    noisy: bool = False
    noisy_sigma0: float = DEFAULT_SIGMA0

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        # One leading batch axis; stacked frames ([B, k, ...]) are flattened with the rest.
        h = obs.astype(jnp.float32).reshape(obs.shape[0], -1)
        for width in self.hidden_sizes:
            h = nn.relu(self._dense(width, "hidden")(h))
        return q_head(h, self.num_actions, self.num_atoms, self.dueling, self._dense)[0]

    def _dense(self, features: int, role: str) -> nn.Module:
        del role  # auto-named layers (Dense_<i>), the parameter names of every saved MLP Q-network
        return NoisyDense(features, self.noisy_sigma0) if self.noisy else nn.Dense(features)


def q_head(
    h: jax.Array, num_actions: int, num_atoms: int, dueling: bool, dense: Callable[[int, str], nn.Module]
) -> tuple[jax.Array, jax.Array | None]:
    """Q-values ``[B, A]`` (``num_atoms == 1``) or one distribution per action ``[B, A, N]``
    from features ``h [B, F]``, and the dueling value stream ``V(s) [B, N]`` (None without
    dueling). ``dense(features, role)`` makes each layer (plain or noisy; ``role`` is
    ``"advantage"``, ``"value"`` or ``"q"``), the advantage before the value. Dueling combines
    ``V + A - mean_a A`` atom by atom (Hessel et al., 2018, Section 3)."""
    shape = (h.shape[0], num_actions, num_atoms)
    value = None
    if dueling:
        adv = dense(num_actions * num_atoms, "advantage")(h).reshape(shape)
        value = dense(num_atoms, "value")(h)
        out = value[:, None, :] + adv - adv.mean(axis=1, keepdims=True)
    else:
        out = dense(num_actions * num_atoms, "q")(h).reshape(shape)
    return (out[..., 0] if num_atoms == 1 else out), value
