"""Policy and value networks (flax) and the functions that act with them."""

from jaxflow.networks.build import actor_critic_network, is_frame_stack, q_network
from jaxflow.networks.conv import (
    TORSOS,
    ConvActorCritic,
    ConvFn,
    ConvQNetwork,
    ImpalaResNet,
    NatureCNN,
    cpu_matmul_conv,
)
from jaxflow.networks.mlp import MLPActorCritic, MLPQNetwork

__all__ = [
    "TORSOS",
    "ConvActorCritic",
    "ConvFn",
    "ConvQNetwork",
    "ImpalaResNet",
    "MLPActorCritic",
    "MLPQNetwork",
    "NatureCNN",
    "actor_critic_network",
    "cpu_matmul_conv",
    "is_frame_stack",
    "q_network",
]
