"""Networks for continuous actions: an actor and a group of Q-functions ``Q(s, a)``, as in
SAC (Haarnoja et al., 2018) and TD3 (Fujimoto et al., 2018), ReLU MLPs on flat observations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

LayerInit = Literal["flax", "pytorch"]
"""How dense layers start: flax's ``nn.Dense`` default (LeCun-normal kernels, zero biases) or
PyTorch's ``nn.Linear`` default (:class:`PyTorchDense`)."""


class PyTorchDense(nn.Dense):
    """``nn.Dense`` started as PyTorch's ``nn.Linear`` is: kernel and bias uniform in
    ``±1/sqrt(fan_in)`` (``kaiming_uniform(a=sqrt(5))``), a third of the variance of flax's
    LeCun-normal kernels. The TD3 authors', SB3's and cleanrl's actors and critics start so."""

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        bound = 1.0 / math.sqrt(inputs.shape[-1])

        def uniform(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
            return jax.random.uniform(key, shape, dtype, -bound, bound)

        kernel = self.param("kernel", uniform, (inputs.shape[-1], self.features), self.param_dtype)
        bias = self.param("bias", uniform, (self.features,), self.param_dtype)
        return inputs @ kernel + bias


def dense(features: int, layer_init: LayerInit = "flax", name: str | None = None) -> nn.Dense:
    """A dense layer of ``features`` units started as ``layer_init`` says."""
    return (PyTorchDense if layer_init == "pytorch" else nn.Dense)(features, name=name)


def relu_mlp(h: jax.Array, hidden_sizes: Sequence[int], layer_init: LayerInit = "flax") -> jax.Array:
    """ReLU layers of ``hidden_sizes`` widths on ``h`` (inside a compact module: named ``Dense_<i>``)."""
    for i, width in enumerate(hidden_sizes):
        h = nn.relu(dense(width, layer_init, f"Dense_{i}")(h))
    return h


class MLPContinuousQ(nn.Module):
    """``Q(s, a) [B]`` from observations ``[B, ...]`` (flattened) and actions ``[B, A]``."""

    hidden_sizes: Sequence[int] = (256, 256)
    layer_init: LayerInit = "flax"

    @nn.compact
    def __call__(self, obs: jax.Array, actions: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs.astype(jnp.float32).reshape(obs.shape[0], -1), actions], axis=-1)
        h = relu_mlp(x, self.hidden_sizes, self.layer_init)
        return dense(1, self.layer_init, f"Dense_{len(self.hidden_sizes)}")(h)[..., 0]


class ActorCritics(nn.Module):
    """An actor giving a distribution's inputs, ``num_critics`` independent Q-functions
    (twin critics: ``num_critics=2``), and with ``initial_alpha`` a learned entropy
    temperature ``log_alpha`` (SAC).

    ``__call__(obs)`` is what a :class:`~jaxflow.policies.Policy` reads: the actor's inputs
    and, as the state's value, ``min_i Q_i(s, tanh(inputs[:, :A]))``, the critics at the
    actor's deterministic action (the squashed mean for SAC, the action itself for TD3);
    workers bootstrap truncated episodes from it. Losses call :meth:`actor` and
    :meth:`critics` through ``apply(..., method=...)``.
    """

    num_outputs: int
    """The distribution's inputs (2A for a squashed Gaussian, A for a deterministic actor)."""
    action_size: int
    hidden_sizes: Sequence[int] = (256, 256)
    num_critics: int = 2
    initial_alpha: float | None = None
    layer_init: LayerInit = "flax"

    def setup(self) -> None:
        self.actor_torso = nn.Sequential(
            [layer for width in self.hidden_sizes for layer in (dense(width, self.layer_init), nn.relu)]
            + [dense(self.num_outputs, self.layer_init)]
        )
        self.q = nn.vmap(
            MLPContinuousQ,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_critics,
        )(self.hidden_sizes, self.layer_init)
        if self.initial_alpha is not None:
            self.log_alpha = self.param("log_alpha", nn.initializers.constant(math.log(self.initial_alpha)), ())

    def actor(self, obs: jax.Array) -> jax.Array:
        """The distribution's inputs ``[B, num_outputs]``."""
        return self.actor_torso(obs.astype(jnp.float32).reshape(obs.shape[0], -1))

    def critics(self, obs: jax.Array, actions: jax.Array) -> jax.Array:
        """``Q_i(s, a)`` of every critic, ``[num_critics, B]``."""
        return self.q(obs, actions)

    def alpha(self) -> jax.Array:
        """The entropy temperature ``exp(log_alpha)`` (SAC)."""
        return jnp.exp(self.log_alpha)

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        inputs = self.actor(obs)
        return inputs, self.critics(obs, jnp.tanh(inputs[:, : self.action_size])).min(axis=0)
