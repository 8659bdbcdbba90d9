"""TD3's and DDPG's settings."""

from __future__ import annotations

import dataclasses
from typing import Literal

from jaxflow.algorithms.sac.config import ActorCriticsConfig
from jaxflow.config import NO_CLIPPING, OptimizerConfig
from jaxflow.config.fields import COUNT, NON_NEGATIVE, SIZE, param


@dataclasses.dataclass(frozen=True)
class TD3Config(ActorCriticsConfig):
    """TD3 settings (plus :class:`~jaxflow.algorithms.sac.config.ActorCriticsConfig`); noise
    scales are in the normalized action space ``[-1, 1]``."""

    loss_fields = ("target_noise", "target_noise_clip")

    layer_init: Literal["flax", "pytorch"] = "pytorch"
    """PyTorch's ``nn.Linear`` start (kernels and biases uniform in ±1/sqrt(fan_in)), as the TD3
    authors' code: started flax's way (three times the variance), the deterministic tanh actor
    of 5 of 8 seeds sat at the action bounds after 15k env steps of the paper's Hopper settings,
    0 of 8 started this way (see :class:`~jaxflow.algorithms.sac.config.ActorCriticsConfig`)."""

    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=1e-3, max_grad_norm=NO_CLIPPING))
    """Adam for actor and critics (see :class:`~jaxflow.config.OptimizerConfig`); lr 1e-3, no clipping."""
    exploration_noise: float = param(0.1, NON_NEGATIVE)
    """Standard deviation of the Gaussian noise added to the actor's action while sampling."""
    random_steps: int = param(1_000, COUNT)
    """Env steps each worker (or device-mode run) takes uniformly random actions before the actor acts."""
    twin_q: bool = param(True)
    """Two critics and the minimum of their targets (clipped double Q-learning)."""
    target_noise: float = param(0.2, NON_NEGATIVE)
    """Target policy smoothing: standard deviation of the noise on the target action (0: none)."""
    target_noise_clip: float = param(0.5, NON_NEGATIVE)
    """The smoothing noise is clipped to ``[-target_noise_clip, target_noise_clip]``."""
    policy_delay: int = param(2, SIZE)
    """SGD steps per actor step (the critics step every time)."""


@dataclasses.dataclass(frozen=True)
class DDPGConfig(TD3Config):
    """DDPG (Lillicrap et al., 2016) as TD3 with its three additions switched off: one
    critic, no target policy smoothing, an actor step at every SGD step."""

    twin_q: bool = param(False)
    """One critic (DDPG)."""
    target_noise: float = param(0.0, NON_NEGATIVE)
    """No target policy smoothing (DDPG)."""
    policy_delay: int = param(1, SIZE)
    """The actor steps with the critic (DDPG)."""
