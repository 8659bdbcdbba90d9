"""R2D2 (Kapturowski et al., 2019, "Recurrent Experience Replay in Distributed Reinforcement
Learning"): a recurrent, dueling Q-network trained on stored, overlapping sequences with the
recurrent state at each start and a burn-in, n-step double Q-learning with value rescaling,
and sequence priorities mixing the max and mean |TD error|.

A folder of named parts: ``config``, ``core`` (value rescaling, TD errors, priorities, loss),
``replay`` (the on-device sequence replay), ``program`` (device mode: the policy, Ape-X's
epsilons per env, the replay settings). Device mode only so far; the loss and priorities
are written for a Ray-mode learner too.
"""

from __future__ import annotations

from jaxflow import AlgorithmSpec, DeviceSpec, LearnerHooks, RunHooks, register_algorithm
from jaxflow.algorithms.r2d2.config import R2D2Config
from jaxflow.algorithms.r2d2.core import (
    burned_in,
    loss,
    rescale,
    rescaled_q_outputs,
    sequence_priorities,
    sequence_td_errors,
    unrescale,
)
from jaxflow.algorithms.r2d2.program import (
    env_epsilons,
    explore_on_device,
    fragment,
    r2d2_policy,
    replay_on_device,
    sgd_steps_per_fragment,
)
from jaxflow.algorithms.r2d2.replay import SequenceReplayState, sequence_buffer

R2D2 = register_algorithm(
    AlgorithmSpec(
        "R2D2",
        R2D2Config,
        loss,
        None,  # no Ray-mode plan yet: R2D2Config refuses mode='ray', resolve_mode a non-JAX env
        policy=r2d2_policy,
        action_spaces=("Discrete",),  # one Q-value per action
        learner=LearnerHooks(sgd=lambda c: (1, c.train_batch_size), target_network=True),
        run=RunHooks(device=DeviceSpec(act=explore_on_device, prepare=fragment, replay=replay_on_device)),
    )
)

__all__ = [
    "R2D2",
    "R2D2Config",
    "SequenceReplayState",
    "burned_in",
    "env_epsilons",
    "explore_on_device",
    "fragment",
    "loss",
    "r2d2_policy",
    "replay_on_device",
    "rescale",
    "rescaled_q_outputs",
    "sequence_buffer",
    "sequence_priorities",
    "sequence_td_errors",
    "sgd_steps_per_fragment",
    "unrescale",
]
