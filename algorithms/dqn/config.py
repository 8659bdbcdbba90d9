"""DQN's settings, with Rainbow's parts as switches (Hessel et al., 2018): distributional
C51 or QR-DQN heads and noisy layers, beside double Q-learning, dueling, n-step returns and
prioritized replay."""

from __future__ import annotations

import dataclasses

from jaxflow.config import OffPolicyConfig, OptimizerConfig, RolloutConfig
from jaxflow.config.fields import MAX_SIZE, POSITIVE, SIZE, UNIT, Check, param, require

AT_LEAST_TWO = Check(low=2, high=MAX_SIZE, high_name="MAX_SIZE")


@dataclasses.dataclass(frozen=True)
class DQNConfig(OffPolicyConfig):
    """DQN settings (plus :class:`~jaxflow.config.OffPolicyConfig`'s replay settings)."""

    learner_group = True
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
    epsilon_timesteps: int = param(10_000, SIZE)
    """Env steps (over all workers) of the linear epsilon decay."""
    huber_delta: float = param(1.0, POSITIVE)
    """Quadratic-to-linear switch point of the TD loss."""
    c51: bool = param(False)
    """Distributional C51 head: a categorical distribution per action over ``num_atoms`` atoms
    from ``v_min`` to ``v_max``, trained by cross-entropy to the projected target (Bellemare et al., 2017)."""
    num_atoms: int = param(51, AT_LEAST_TWO)
    """C51's atoms (the paper's 51)."""
    v_min: float = param(-10.0)
    """C51's smallest return atom."""
    v_max: float = param(10.0)
    """C51's largest return atom."""
    qr: bool = param(False)
    """Quantile-regression head (QR-DQN, Dabney et al., 2018): ``num_quantiles`` quantiles per
    action trained by the quantile Huber loss (its threshold is ``huber_delta``)."""
    num_quantiles: int = param(32, AT_LEAST_TWO)
    """QR-DQN's quantiles. The loss compares every pair of quantiles, so its cost grows as
    ``num_quantiles^2``: 32 here, where the paper's Atari agent has 200."""
    noisy: bool = param(False)
    """Noisy layers with factorised Gaussian noise (Fortunato et al., 2018), resampled on every
    acting step and absent in greedy evaluation; set ``epsilon_initial = epsilon_final = 0``
    (Ape-X: ``worker_epsilon_base = 0``) to explore by the noise alone."""
    noisy_sigma0: float = param(0.5, POSITIVE)
    """The noise's initial scale sigma_0 (each layer's sigma starts at ``sigma_0 / sqrt(fan_in)``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        require(not (self.c51 and self.qr), f"{name}: c51 and qr are two heads; turn on one of them, not both.")
        require(self.v_min < self.v_max, f"{name}.v_min ({self.v_min}) must be below v_max ({self.v_max}).")
