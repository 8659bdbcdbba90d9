"""DQN's settings."""

from __future__ import annotations

import dataclasses

from jaxflow.config import OffPolicyConfig, OptimizerConfig, RolloutConfig
from jaxflow.config.fields import POSITIVE, UNIT, param


@dataclasses.dataclass(frozen=True)
class DQNConfig(OffPolicyConfig):
    """DQN settings (plus :class:`~jaxflow.config.OffPolicyConfig`'s replay settings)."""

    loss_fields = ("huber_delta",)

    rollout: RolloutConfig = param(None, factory=lambda: RolloutConfig(num_workers=1, rollout_fragment_length=16))
    """Rollout workers (see :class:`~jaxflow.config.RolloutConfig`); DQN's one worker samples
    16 steps per env between two replay rounds."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=1e-3, max_grad_norm=10.0))
    """Adam (see :class:`~jaxflow.config.OptimizerConfig`); DQN's learning rate is 1e-3, gradients clipped to 10."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """Widths of the Q-network's hidden ReLU layers."""
    double_q: bool = param(True)
    """Select the bootstrap action with the online network, evaluate it with the target."""
    dueling: bool = param(True)
    """Dueling value/advantage head."""
    epsilon_initial: float = param(1.0, UNIT)
    """Exploration rate at the start."""
    epsilon_final: float = param(0.02, UNIT)
    """Exploration rate after ``epsilon_timesteps``."""
    epsilon_timesteps: int = param(10_000, POSITIVE)
    """Env steps (over all workers) of the linear epsilon decay."""
    huber_delta: float = param(1.0, POSITIVE)
    """Quadratic-to-linear switch point of the TD loss."""
