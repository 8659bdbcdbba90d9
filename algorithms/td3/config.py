"""TD3's and DDPG's settings."""

from __future__ import annotations

import dataclasses

from jaxflow.algorithms.sac.config import NO_CLIPPING
from jaxflow.config import OffPolicyConfig, OptimizerConfig, RolloutConfig
from jaxflow.config.fields import NON_NEGATIVE, POSITIVE, UNIT, param


@dataclasses.dataclass(frozen=True)
class TD3Config(OffPolicyConfig):
    """TD3 settings (plus :class:`~jaxflow.config.OffPolicyConfig`'s replay settings, with
    the paper's defaults: uniform one-step replay, one SGD step of 256 per env step, Polyak
    averaging with tau = 0.005). Noise scales are in the normalized action space ``[-1, 1]``."""

    rollout: RolloutConfig = param(
        None, factory=lambda: RolloutConfig(num_workers=1, num_envs_per_worker=1, rollout_fragment_length=8)
    )
    """Rollout workers (see :class:`~jaxflow.config.RolloutConfig`); one worker steps one env, 8 steps per fragment."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=1e-3, max_grad_norm=NO_CLIPPING))
    """Adam for actor and critics (see :class:`~jaxflow.config.OptimizerConfig`); lr 1e-3, no clipping."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Widths of the actor's and each critic's hidden ReLU layers."""
    train_batch_size: int = param(256, POSITIVE)
    """Replayed transitions per SGD step."""
    samples_per_insert: float = param(256.0, POSITIVE)
    """Replay ratio; 256 (= train_batch_size) is one SGD step per env step."""
    buffer_size: int = param(1_000_000, POSITIVE)
    """Transitions kept over all replay shards."""
    n_step: int = param(1, POSITIVE)
    """Steps summed into each return before bootstrapping."""
    target_update_period: int = param(1, POSITIVE)
    """SGD steps between two target updates."""
    tau: float = param(0.005, UNIT)
    """Polyak averaging rate of the target actor and critics per SGD step."""
    prioritized_replay: bool = param(False)
    """Sample in proportion to |TD error|^alpha (False: uniformly, as in the paper)."""
    max_weight_sync_delay: int = param(64, POSITIVE)
    """Env steps a worker samples between two fetches of the learner's weights."""
    min_env_steps_per_iteration: int = param(1_000, NON_NEGATIVE)
    """Env steps sampled per reported training iteration."""
    exploration_noise: float = param(0.1, NON_NEGATIVE)
    """Standard deviation of the Gaussian noise added to the actor's action while sampling."""
    random_steps: int = param(1_000, NON_NEGATIVE)
    """Env steps each worker (or device-mode run) takes uniformly random actions before the actor acts."""
    twin_q: bool = param(True)
    """Two critics and the minimum of their targets (clipped double Q-learning)."""
    target_noise: float = param(0.2, NON_NEGATIVE)
    """Target policy smoothing: standard deviation of the noise on the target action (0: none)."""
    target_noise_clip: float = param(0.5, NON_NEGATIVE)
    """The smoothing noise is clipped to ``[-target_noise_clip, target_noise_clip]``."""
    policy_delay: int = param(2, POSITIVE)
    """SGD steps per actor step (the critics step every time)."""


@dataclasses.dataclass(frozen=True)
class DDPGConfig(TD3Config):
    """DDPG (Lillicrap et al., 2016) as TD3 with its three additions switched off: one
    critic, no target policy smoothing, an actor step at every SGD step."""

    twin_q: bool = param(False)
    """One critic (DDPG)."""
    target_noise: float = param(0.0, NON_NEGATIVE)
    """No target policy smoothing (DDPG)."""
    policy_delay: int = param(1, POSITIVE)
    """The actor steps with the critic (DDPG)."""
