"""Policy and value networks (flax) and the functions that act with them."""

from jaxflow.networks.build import actor_critic_network, is_frame_stack, q_network
from jaxflow.networks.continuous import ActorCritics, MLPContinuousQ
from jaxflow.networks.conv import (
    TORSOS,
    ConvActorCritic,
    ConvFn,
    ConvQNetwork,
    ImpalaResNet,
    NatureCNN,
    cpu_matmul_conv,
)
from jaxflow.networks.mlp import MLPActorCritic, MLPQNetwork, policy_head
from jaxflow.networks.models import build_model, check_outputs, describe_module, register_model
from jaxflow.networks.noisy import NoisyDense, factorised_noise, signed_sqrt

__all__ = [
    "TORSOS",
    "ActorCritics",
    "ConvActorCritic",
    "ConvFn",
    "ConvQNetwork",
    "ImpalaResNet",
    "MLPActorCritic",
    "MLPContinuousQ",
    "MLPQNetwork",
    "NatureCNN",
    "NoisyDense",
    "actor_critic_network",
    "build_model",
    "check_outputs",
    "cpu_matmul_conv",
    "describe_module",
    "factorised_noise",
    "is_frame_stack",
    "policy_head",
    "q_network",
    "register_model",
    "signed_sqrt",
]
