"""MAML: model-agnostic meta-learning with a policy-gradient inner loop (Finn, Abbeel &
Levine, 2017, "Model-Agnostic Meta-Learning for Fast Adaptation of Deep Networks",
Section 3.2 and Algorithm 3), for discrete-action policies on a distribution of JAX tasks
(see :mod:`envs.tasks`).

A meta-iteration: draw ``meta_batch_size`` tasks; in each, sample ``episodes_per_task``
episodes with the meta-parameters theta, take ``inner_steps`` plain SGD steps of the
vanilla policy-gradient loss on them (theta'_i), sample as many episodes with theta'_i;
then one Adam step on the mean over tasks of the policy-gradient loss of the second
episodes at theta'_i, differentiated through the inner step (second order; no finite
differences). The paper's outer optimizer is TRPO; here it is Adam on that loss.

Either everything runs on the device as one compiled function (``mode="device"``, the
default for these JAX tasks), or Ray actors on CPUs collect and adapt, each for its share
of the tasks, and the driver takes the meta-gradient (``mode="ray"``). Both draw the same
tasks and episodes from the same keys: with one worker, Ray mode repeats device mode.

A folder of named parts: ``config``, ``losses`` (the pure functions), ``plan`` (Ray mode's
dataflow and the metrics of a meta-iteration), ``program`` (the run in either mode).
"""

from __future__ import annotations

from jaxflow import AlgorithmSpec, RunHooks, register_algorithm
from jaxflow.algorithms.maml.config import MAMLConfig
from jaxflow.algorithms.maml.losses import (
    adapt,
    collect,
    evaluate_adaptation,
    inner_loss,
    loss,
    meta_loss,
    meta_update,
    pg_advantages,
    pg_batch,
    reward_to_go,
    rollout_episodes,
    shard_key,
)
from jaxflow.algorithms.maml.plan import plan
from jaxflow.algorithms.maml.program import MAMLProgram, MAMLState

__all__ = [
    "MAML",
    "MAMLConfig",
    "MAMLProgram",
    "MAMLState",
    "adapt",
    "collect",
    "evaluate_adaptation",
    "inner_loss",
    "loss",
    "meta_loss",
    "meta_update",
    "pg_advantages",
    "pg_batch",
    "plan",
    "reward_to_go",
    "rollout_episodes",
    "shard_key",
]

MAML = register_algorithm(
    AlgorithmSpec(
        "MAML",
        MAMLConfig,
        loss,
        plan,
        action_spaces=("Discrete",),
        run=RunHooks(program=MAMLProgram, program_kinds=("tasks",)),  # task distributions only
    )
)
