"""SAC's settings."""

from __future__ import annotations

import dataclasses
from typing import Literal

from jaxflow.config import NO_CLIPPING, OffPolicyConfig, OptimizerConfig, RolloutConfig
from jaxflow.config.fields import COUNT, POSITIVE, SIZE, UNIT, param


@dataclasses.dataclass(frozen=True)
class ActorCriticsConfig(OffPolicyConfig):
    """What SAC, TD3 and DDPG share (plus :class:`~jaxflow.config.OffPolicyConfig`'s replay
    settings, with their papers' defaults: uniform one-step replay, one SGD step of 256 per
    env step, Polyak averaging with tau = 0.005, no gradient clipping)."""

    rollout: RolloutConfig = param(
        None, factory=lambda: RolloutConfig(num_workers=1, num_envs_per_worker=1, rollout_fragment_length=8)
    )
    """Rollout workers (see :class:`~jaxflow.config.RolloutConfig`); one worker steps one env, 8 steps per fragment."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=3e-4, max_grad_norm=NO_CLIPPING))
    """Adam for every part alike (see :class:`~jaxflow.config.OptimizerConfig`); lr 3e-4, no clipping."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Widths of the actor's and each critic's hidden ReLU layers."""
    layer_init: Literal["flax", "pytorch"] = "flax"
    """How the actor's and critics' layers start: ``"flax"``, flax's default (LeCun-normal
    kernels, zero biases), or ``"pytorch"``, PyTorch's ``nn.Linear`` default (kernels and biases
    uniform in ±1/sqrt(fan_in)) as the TD3 authors', SB3's and cleanrl's networks start. With
    the TD3 paper's settings on Hopper-v5, the actors of 5 of 8 seeds started flax's way sat at
    the action bounds after 15k env steps (every action +-1, falling in 10-22 steps), none of 8
    started PyTorch's way (docs/results.md, the TD3 Hopper row), so TD3 and DDPG start
    PyTorch's way by default; SAC, whose entropy term keeps its squashed Gaussian off the
    bounds, keeps flax's (as sbx's SAC does)."""
    train_batch_size: int = param(256, SIZE)
    """Replayed transitions per SGD step."""
    samples_per_insert: float = param(256.0, POSITIVE)
    """Replay ratio; 256 (= train_batch_size) is one SGD step per env step."""
    buffer_size: int = param(1_000_000, SIZE)
    """Transitions kept over all replay shards."""
    n_step: int = param(1, SIZE)
    """Steps summed into each return before bootstrapping."""
    target_update_period: int = param(1, SIZE)
    """SGD steps between two target updates."""
    tau: float = param(0.005, UNIT)
    """Polyak averaging rate of the target networks per SGD step."""
    prioritized_replay: bool = param(False)
    """Sample in proportion to |TD error|^alpha (False: uniformly, as in the paper)."""
    max_weight_sync_delay: int = param(64, SIZE)
    """Env steps a worker samples between two fetches of the learner's weights."""
    min_env_steps_per_iteration: int = param(1_000, COUNT)
    """Env steps sampled per reported training iteration."""


@dataclasses.dataclass(frozen=True)
class SACConfig(ActorCriticsConfig):
    """SAC settings (plus :class:`ActorCriticsConfig`)."""

    initial_alpha: float = param(1.0, POSITIVE)
    """Entropy temperature at the start; learned toward ``target_entropy``."""
    target_entropy: float | None = None
    """Entropy the temperature steers the policy toward (None: ``-A``, minus the action dimensions)."""
