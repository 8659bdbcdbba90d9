"""The network for an observation shape, and the pure functions that act with a network."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxflow.networks.conv import ConvActorCritic, ConvQNetwork
from jaxflow.networks.mlp import MLPActorCritic, MLPQNetwork


def forward_packed(apply_fn: Callable[..., tuple[jax.Array, jax.Array]], params: Any, obs: jax.Array) -> jax.Array:
    """``[B, A + 1]``: the logits, then the value, in one array (one transfer to the host)."""
    logits, value = apply_fn(params, obs)
    return jnp.concatenate([logits, value[:, None]], axis=-1)


def greedy_action(apply_fn: Callable[..., tuple[jax.Array, jax.Array]], params: Any, obs: jax.Array) -> jax.Array:
    """The most likely action for each observation (evaluation)."""
    logits, _ = apply_fn(params, obs)
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def is_frame_stack(obs_shape: Sequence[int]) -> bool:
    """Whether observations are stacks of images ``[k, H, W]`` large enough for the
    convolutional torsos (the Nature CNN's strides need at least 36x36); small grids such
    as MinAtar's ``[10, 10, 4]`` go to an MLP."""
    return len(obs_shape) == 3 and min(obs_shape[1:]) >= 36


def actor_critic_network(
    obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int], torso: str = "nature"
) -> nn.Module:
    """The policy network for an observation shape: a convolutional torso for image frame
    stacks (``[k, H, W]``), an MLP on the flattened observation for everything else."""
    if is_frame_stack(obs_shape):
        return ConvActorCritic(num_actions, torso)
    return MLPActorCritic(num_actions, tuple(hidden_sizes), max(1, len(obs_shape)))


def q_network(
    obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int], torso: str = "nature", dueling: bool = True
) -> nn.Module:
    """The Q-network for an observation shape, chosen as :func:`actor_critic_network` does."""
    if is_frame_stack(obs_shape):
        return ConvQNetwork(num_actions, torso, dueling)
    return MLPQNetwork(num_actions, tuple(hidden_sizes), dueling)
