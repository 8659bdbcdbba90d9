"""Ape-X DDPG (Horgan et al., 2018, "Distributed Prioritized Experience Replay", Ape-X DPG):
DDPG's actor, critic and loss on Ape-X's plan: many actors, each exploring with its own
Gaussian noise scale, writing to sharded prioritized replay, and one learner thread whose
TD errors return to the shards as priorities. DDPG's spec and Ape-X's plan are imported,
not copied; what is new is the per-actor noise and the config that joins the two.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from jaxflow import RunHooks, register_algorithm
from jaxflow.algorithms.apex import APE_X_PLAN, actor_rate, check_distributed, make_limited_replay, plan
from jaxflow.algorithms.td3 import DDPG, DDPGConfig, noisy_actions
from jaxflow.config import DistributedReplayConfig, RolloutConfig
from jaxflow.config.fields import COUNT, NON_NEGATIVE, SIZE, UNIT, param


@dataclasses.dataclass(frozen=True)
class APEXDDPGConfig(DDPGConfig):
    """Ape-X DDPG settings: DDPG's, with the paper's distributed replay, target copies every
    100 SGD steps, and per-actor noise ``exploration_noise^(1 + worker_noise_alpha i / (N - 1))``."""

    asynchronous_plan: ClassVar[str] = APE_X_PLAN

    rollout: RolloutConfig = param(None, factory=lambda: RolloutConfig(num_workers=2, rollout_fragment_length=16))
    """Actors (see :class:`~jaxflow.config.RolloutConfig`), each with its own noise scale."""
    distributed: DistributedReplayConfig = param(None, factory=lambda: DistributedReplayConfig(replay_batch_size=256))
    """Replay requests, requests in flight and the learner thread's queues."""
    num_replay_shards: int = param(2, SIZE)
    """Replay shard actors; each fragment goes to one chosen at random."""
    buffer_size: int = param(100_000, SIZE)
    """Transitions kept over all replay shards."""
    train_batch_size: int = param(256, SIZE)
    """Replayed transitions per SGD step."""
    samples_per_insert: float | None = None  # type: ignore[assignment]  # as Ape-X's: optional
    """Rate limiter on every shard; None (default) lets the learner replay as fast as it can."""
    n_step: int = param(3, SIZE)
    """n-step returns, as in the paper."""
    target_update_period: int = param(100, SIZE)
    """SGD steps between target network updates (the paper copies every 100)."""
    tau: float = param(1.0, UNIT)
    """1: the target network is copied (the paper's)."""
    exploration_noise: float = param(0.4, NON_NEGATIVE)
    """Actor 0's noise std in ``[-1, 1]`` action units; the others' fall off as Ape-X's epsilons do."""
    worker_noise_alpha: float = param(7.0, NON_NEGATIVE)
    """alpha in actor ``i``'s noise ``exploration_noise^(1 + alpha i / (N - 1))``."""
    max_weight_sync_delay: int = param(400, SIZE)
    """Env steps an actor samples between two fetches of the learner's weights (the paper's 400)."""
    min_env_steps_per_iteration: int = param(2_000, COUNT)
    """Env steps sampled per reported training iteration."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_distributed(self)


def worker_noise(config: APEXDDPGConfig, worker_index: int) -> float:
    """Actor ``worker_index``'s noise std: :func:`~jaxflow.algorithms.apex.actor_rate` of ``exploration_noise``."""
    return actor_rate(config.exploration_noise, config.worker_noise_alpha, worker_index, config.rollout.num_workers)


def explore(
    rng: np.random.Generator, inputs: np.ndarray, config: APEXDDPGConfig, worker_index: int, env_steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """DDPG's exploration (uniform for ``random_steps``, then Gaussian noise) at the actor's own scale."""
    return noisy_actions(rng, inputs, worker_noise(config, worker_index), env_steps < config.random_steps)


# DDPG's spec (deterministic actor, critic, loss, replay rows, optimizer) with Ape-X's actors,
# shards and plan; no device mode.
APEX_DDPG = register_algorithm(
    dataclasses.replace(
        DDPG,
        name="APEX_DDPG",
        config_cls=APEXDDPGConfig,
        plan=plan,
        workers=dataclasses.replace(DDPG.workers, explore=explore),
        run=RunHooks(replay=make_limited_replay),
    )
)

__all__ = ["APEX_DDPG", "APEXDDPGConfig", "explore", "worker_noise"]
