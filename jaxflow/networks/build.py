"""The network for an observation shape: convolutional for frame stacks, an MLP otherwise."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn

from jaxflow.networks.conv import ConvActorCritic, ConvQNetwork
from jaxflow.networks.mlp import MLPActorCritic, MLPQNetwork
from jaxflow.networks.noisy import DEFAULT_SIGMA0


def is_frame_stack(obs_shape: Sequence[int]) -> bool:
    """Whether observations are stacks of images ``[k, H, W]`` large enough for the
    convolutional torsos (the Nature CNN's strides need at least 36x36); small grids such
    as MinAtar's ``[10, 10, 4]`` go to an MLP."""
    return len(obs_shape) == 3 and min(obs_shape[1:]) >= 36


def actor_critic_network(
    obs_shape: Sequence[int],
    num_outputs: int,
    hidden_sizes: Sequence[int],
    torso: str = "nature",
    num_free_outputs: int = 0,
) -> nn.Module:
    """The policy network for an observation shape and a distribution's inputs
    (``num_outputs``, of which ``num_free_outputs`` are parameters): a convolutional torso
    for image frame stacks (``[k, H, W]``), an MLP on the flattened observation for everything else."""
    if is_frame_stack(obs_shape):
        return ConvActorCritic(num_outputs, torso, num_free_outputs=num_free_outputs)
    return MLPActorCritic(num_outputs, tuple(hidden_sizes), max(1, len(obs_shape)), num_free_outputs)


def q_network(
    obs_shape: Sequence[int],
    num_actions: int,
    hidden_sizes: Sequence[int],
    torso: str = "nature",
    dueling: bool = True,
    num_atoms: int = 1,
    noisy_sigma0: float | None = None,
) -> nn.Module:
    """The Q-network for an observation shape, chosen as :func:`actor_critic_network` does:
    ``num_atoms`` outputs per action (1: Q-values), noisy layers unless ``noisy_sigma0`` is None."""
    noisy, sigma0 = noisy_sigma0 is not None, noisy_sigma0 or DEFAULT_SIGMA0
    if is_frame_stack(obs_shape):
        return ConvQNetwork(num_actions, torso, dueling, num_atoms=num_atoms, noisy=noisy, noisy_sigma0=sigma0)
    return MLPQNetwork(num_actions, tuple(hidden_sizes), dueling, num_atoms, noisy, sigma0)
