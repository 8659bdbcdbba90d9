"""SAC (Haarnoja et al., 2018): a tanh-squashed Gaussian actor, twin critics with Polyak-
averaged targets, and an entropy temperature learned toward a target entropy; on the replay
shards in Ray mode (DQN's plan: store fragments, replay at ``samples_per_insert``) and on
the on-device buffer in device mode.

A folder of named parts: ``config``, ``learning`` (targets and losses); replay, encoding and
the plan are DQN's, imported.
"""

from __future__ import annotations

from typing import Any

from jaxflow import AlgorithmSpec, DeviceSpec, LearnerHooks, RunHooks, WorkerHooks, register_algorithm
from jaxflow.algorithms.dqn import encode, make_replay, multiagent_flow, plan, replay_on_device, transitions
from jaxflow.algorithms.sac.config import SACConfig
from jaxflow.algorithms.sac.learning import (
    actor_inputs,
    actor_loss,
    critic_loss,
    critic_values,
    loss,
    postprocess,
    soft_td_target,
    temperature_loss,
)
from jaxflow.policies import Policy, actor_critics_policy


def policy(config: SACConfig, obs_space: Any, action_space: Any) -> Policy:
    """A squashed Gaussian actor, twin critics and a learned temperature."""
    return actor_critics_policy(config, obs_space, action_space, "squashed", config.initial_alpha)


SAC = register_algorithm(
    AlgorithmSpec(
        "SAC",
        SACConfig,
        loss,
        plan,
        postprocess,
        policy=policy,
        action_spaces=("Box",),
        learner=LearnerHooks(sgd=lambda c: (1, c.train_batch_size), target_network=True),
        workers=WorkerHooks(encode=encode),
        run=RunHooks(
            replay=make_replay,
            device=DeviceSpec(prepare=transitions, replay=replay_on_device),
            flow=multiagent_flow,
        ),
    )
)

__all__ = [
    "SAC",
    "SACConfig",
    "actor_inputs",
    "actor_loss",
    "critic_loss",
    "critic_values",
    "loss",
    "policy",
    "postprocess",
    "soft_td_target",
    "temperature_loss",
]
