"""DQN's settings."""

from __future__ import annotations

import dataclasses

from jaxflow import (
    CommonConfig,
)
from jaxflow.config import OptimizerConfig, RolloutConfig
from jaxflow.config.fields import NON_NEGATIVE, POSITIVE, UNIT, param, require


@dataclasses.dataclass(frozen=True)
class DQNConfig(CommonConfig):
    """DQN settings (plus :class:`~jaxflow.config.CommonConfig`)."""

    rollout: RolloutConfig = param(None, factory=lambda: RolloutConfig(num_workers=1, rollout_fragment_length=16))
    """Rollout workers (see :class:`~jaxflow.config.RolloutConfig`); DQN's one worker samples
    16 steps per env between two replay rounds."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=1e-3, max_grad_norm=10.0))
    """Adam (see :class:`~jaxflow.config.OptimizerConfig`); DQN's learning rate is 1e-3, gradients clipped to 10."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """Widths of the Q-network's hidden ReLU layers."""
    train_batch_size: int = param(64, POSITIVE)
    """Replayed transitions per SGD step."""
    samples_per_insert: float = param(8.0, POSITIVE)
    """Replay ratio: transitions replayed per transition sampled from the environments."""
    buffer_size: int = param(50_000, POSITIVE)
    """Transitions kept over all replay shards (the oldest are overwritten)."""
    learning_starts: int = param(1_000, NON_NEGATIVE)
    """Transitions per shard before replay starts."""
    num_replay_shards: int = param(1, POSITIVE)
    """Replay shard actors the buffer is split over."""
    n_step: int = param(3, POSITIVE)
    """Steps summed into each return before bootstrapping (1 is one-step Q-learning)."""
    double_q: bool = param(True)
    """Select the bootstrap action with the online network, evaluate it with the target."""
    dueling: bool = param(True)
    """Dueling value/advantage head."""
    target_update_period: int = param(100, POSITIVE)
    """SGD steps between copies of the online parameters into the target network."""
    prioritized_replay: bool = param(True)
    """Sample in proportion to |TD error|^alpha (False: uniformly)."""
    prioritized_replay_alpha: float = param(0.6, NON_NEGATIVE)
    """Priority exponent alpha."""
    prioritized_replay_beta: float = param(0.4, UNIT)
    """Importance-sampling exponent at the start; annealed linearly to 1."""
    beta_annealing_steps: int = param(20_000, POSITIVE)
    """SGD steps over which beta reaches 1."""
    prioritized_replay_eps: float = param(1e-6, POSITIVE)
    """Added to |TD error| so every transition stays reachable."""
    epsilon_initial: float = param(1.0, UNIT)
    """Exploration rate at the start."""
    epsilon_final: float = param(0.02, UNIT)
    """Exploration rate after ``epsilon_timesteps``."""
    epsilon_timesteps: int = param(10_000, POSITIVE)
    """Env steps (over all workers) of the linear epsilon decay."""
    frame_stack: int = param(1, POSITIVE)
    """Frames stacked along each observation's first axis (4 for Atari); replay stores single frames."""
    max_weight_sync_delay: int = param(256, POSITIVE)
    """Env steps a worker samples between two fetches of the learner's weights."""
    huber_delta: float = param(1.0, POSITIVE)
    """Quadratic-to-linear switch point of the TD loss."""
    min_env_steps_per_iteration: int = param(2_000, NON_NEGATIVE)
    """Env steps sampled per reported training iteration."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.n_step < self.rollout.rollout_fragment_length or self.n_step == 1,
            f"n_step ({self.n_step}) must be smaller than rollout_fragment_length "
            f"({self.rollout.rollout_fragment_length}).",
        )
        require(
            self.buffer_size >= self.num_replay_shards * max(self.learning_starts, self.train_batch_size),
            f"buffer_size ({self.buffer_size}) must hold learning_starts ({self.learning_starts}) transitions per shard.",
        )
