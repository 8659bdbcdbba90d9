"""DQN (Mnih et al., 2015, "Human-level control through deep reinforcement learning") with
double Q-learning (van Hasselt et al., 2016), dueling heads (Wang et al., 2016), n-step
returns computed on the rollout workers, and prioritized or uniform replay (Schaul et
al., 2016) in replay shards.

A folder of named parts (Acme-style): ``config``, ``acting`` (exploration), ``learning``
(targets, priorities, loss), ``replay``, ``plan``.
"""

from __future__ import annotations

from jaxflow import AlgorithmSpec, DeviceSpec, LearnerHooks, RunHooks, WorkerHooks, register_algorithm
from jaxflow.algorithms.dqn.acting import epsilon, epsilon_greedy, epsilon_schedule, explore, explore_on_device
from jaxflow.algorithms.dqn.config import DQNConfig
from jaxflow.algorithms.dqn.learning import encode, loss, n_step_targets, postprocess, replay_fields, td_errors
from jaxflow.algorithms.dqn.plan import multiagent_flow, plan, store_flow, train_flow
from jaxflow.algorithms.dqn.replay import (
    beta_schedule,
    importance_exponent,
    make_replay,
    replay_on_device,
    sgd_steps_per_fragment,
    transitions,
)
from jaxflow.policies import q_policy

DQN = register_algorithm(
    AlgorithmSpec(
        "DQN",
        DQNConfig,
        loss,
        plan,
        postprocess,
        policy=q_policy,
        action_spaces=("Discrete",),  # one Q-value per action
        learner=LearnerHooks(sgd=lambda c: (1, c.train_batch_size), target_network=True),
        workers=WorkerHooks(explore=explore, encode=encode),
        run=RunHooks(
            replay=make_replay,
            device=DeviceSpec(act=explore_on_device, prepare=transitions, replay=replay_on_device),
            flow=multiagent_flow,
        ),
    )
)

__all__ = [
    "DQN",
    "DQNConfig",
    "beta_schedule",
    "encode",
    "epsilon",
    "epsilon_greedy",
    "epsilon_schedule",
    "explore",
    "explore_on_device",
    "importance_exponent",
    "loss",
    "make_replay",
    "multiagent_flow",
    "n_step_targets",
    "plan",
    "postprocess",
    "replay_fields",
    "replay_on_device",
    "sgd_steps_per_fragment",
    "store_flow",
    "td_errors",
    "train_flow",
    "transitions",
]
