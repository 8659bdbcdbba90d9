"""TD3 (Fujimoto et al., 2018) and DDPG (Lillicrap et al., 2016): a deterministic tanh actor
exploring with Gaussian noise, critics with Polyak-averaged targets; TD3 adds twin critics,
target policy smoothing and delayed actor steps, DDPG is TD3 with the three switched off.
On the replay shards in Ray mode (DQN's plan) and on the on-device buffer in device mode.

A folder of named parts: ``config`` and ``learning``; replay, encoding and the plan are
DQN's, the critic loss and network readers SAC's, imported.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxflow import AlgorithmSpec, DeviceSpec, LearnerHooks, RunHooks, WorkerHooks, register_algorithm
from jaxflow.algorithms.dqn import encode, make_replay, multiagent_flow, plan, replay_on_device, transitions
from jaxflow.algorithms.sac import postprocess
from jaxflow.algorithms.td3.config import DDPGConfig, TD3Config
from jaxflow.algorithms.td3.learning import (
    explore,
    explore_on_device,
    loss,
    noisy_actions,
    optimizer,
    smoothed_target_actions,
)
from jaxflow.policies import Policy, actor_critics_policy


def policy(config: TD3Config, obs_space: Any, action_space: Any) -> Policy:
    """A deterministic tanh actor and two critics (one with ``twin_q=False``)."""
    return actor_critics_policy(config, obs_space, action_space, "deterministic", None, 2 if config.twin_q else 1)


TD3 = register_algorithm(
    AlgorithmSpec(
        "TD3",
        TD3Config,
        loss,
        plan,
        postprocess,
        policy=policy,
        action_spaces=("Box",),
        learner=LearnerHooks(sgd=lambda c: (1, c.train_batch_size), target_network=True, optimizer=optimizer),
        workers=WorkerHooks(explore=explore, encode=encode),
        run=RunHooks(
            replay=make_replay,
            device=DeviceSpec(act=explore_on_device, prepare=transitions, replay=replay_on_device),
            flow=multiagent_flow,
        ),
    )
)
DDPG = register_algorithm(dataclasses.replace(TD3, name="DDPG", config_cls=DDPGConfig))

__all__ = [
    "DDPG",
    "TD3",
    "DDPGConfig",
    "TD3Config",
    "explore",
    "explore_on_device",
    "loss",
    "noisy_actions",
    "optimizer",
    "policy",
    "smoothed_target_actions",
]
