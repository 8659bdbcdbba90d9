"""R2D2 (Kapturowski et al., 2019, "Recurrent Experience Replay in Distributed Reinforcement
Learning"): a recurrent, dueling Q-network trained on stored, overlapping sequences with the
recurrent state at each start and a burn-in, n-step double Q-learning with value rescaling,
and sequence priorities mixing the max and mean |TD error|.

A folder of named parts: ``config``, ``core`` (value rescaling, TD errors, priorities, loss:
one learner step, which both modes train with), ``replay`` (the sequence ring as pure JAX
functions, lanes for Ray mode's actors), ``program`` (device mode: the policy, Ape-X's
epsilons per env, the replay settings), ``distributed`` (Ray mode: actors with Ape-X's
epsilons per actor, replay shards holding the sequence ring, Ape-X's plan).
"""

from __future__ import annotations

from jaxflow import AlgorithmSpec, DeviceSpec, LearnerHooks, RunHooks, WorkerHooks, register_algorithm
from jaxflow.algorithms.apex import explore
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
from jaxflow.algorithms.r2d2.distributed import (
    SequenceRing,
    SequenceShard,
    encode,
    example_fragment,
    fixed_importance,
    make_sequence_replay,
    plan,
    shard_options,
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
        plan,
        policy=r2d2_policy,
        action_spaces=("Discrete",),  # one Q-value per action
        learner=LearnerHooks(sgd=lambda c: (1, c.train_batch_size), target_network=True),
        workers=WorkerHooks(explore=explore, encode=encode),  # Ape-X's epsilon per actor
        run=RunHooks(
            replay=make_sequence_replay,
            device=DeviceSpec(act=explore_on_device, prepare=fragment, replay=replay_on_device),
        ),
    )
)

__all__ = [
    "R2D2",
    "R2D2Config",
    "SequenceReplayState",
    "SequenceRing",
    "SequenceShard",
    "burned_in",
    "encode",
    "env_epsilons",
    "example_fragment",
    "explore_on_device",
    "fixed_importance",
    "fragment",
    "loss",
    "make_sequence_replay",
    "plan",
    "r2d2_policy",
    "replay_on_device",
    "rescale",
    "rescaled_q_outputs",
    "sequence_buffer",
    "sequence_priorities",
    "sequence_td_errors",
    "sgd_steps_per_fragment",
    "shard_options",
    "unrescale",
]
