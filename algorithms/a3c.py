"""A3C: asynchronous advantage actor-critic (Mnih et al., 2016, "Asynchronous Methods
for Deep Reinforcement Learning"). Workers compute gradients of A2C's loss on their
own fragments; the learner applies them one worker at a time and sends the new
weights back to that worker alone.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jaxflow import (
    AlgorithmSpec,
    ApplyGradients,
    CommonConfig,
    ComputeGradients,
    ParallelRollouts,
    ReportMetrics,
    WorkerHooks,
    register_algorithm,
)
from jaxflow.algorithms.a2c import loss, postprocess
from jaxflow.config import OptimizerConfig, RolloutConfig
from jaxflow.config.fields import COUNT, NON_NEGATIVE, UNIT, param


@dataclasses.dataclass(frozen=True)
class A3CConfig(CommonConfig):
    """A3C settings (plus :class:`~jaxflow.config.CommonConfig`)."""

    on_policy = True
    asynchronous_plan: ClassVar[str] = (
        "each worker's gradients are applied as they arrive, to weights that the other workers' "
        "gradients moved in an order set by their speed"
    )

    rollout: RolloutConfig = param(None, factory=lambda: RolloutConfig(rollout_fragment_length=16))
    """Rollout workers (see :class:`~jaxflow.config.RolloutConfig`); 16-step fragments, one gradient each."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=1e-3))
    """Adam (see :class:`~jaxflow.config.OptimizerConfig`); A3C's learning rate is 1e-3."""
    gae_lambda: float = param(0.95, UNIT)
    """GAE's lambda."""
    vf_coef: float = param(0.5, NON_NEGATIVE)
    """Weight of the value loss."""
    ent_coef: float = param(0.01, NON_NEGATIVE)
    """Weight of the entropy bonus."""
    min_env_steps_per_iteration: int = param(2000, COUNT)
    """A training iteration applies gradients until this many env steps were sampled."""


def plan(workers, learner, config: A3CConfig):
    # (1) each worker samples and computes gradients on its own fragment
    grads = ParallelRollouts(workers, mode="raw").par_for_each(ComputeGradients()).gather_async()
    # (2) apply them as they arrive; only the worker that sent them gets the new weights
    train = grads.for_each(ApplyGradients(learner, workers))
    return ReportMetrics(train, workers, config.min_env_steps_per_iteration)


A3C = register_algorithm(AlgorithmSpec("A3C", A3CConfig, loss, plan, postprocess, workers=WorkerHooks(gradients=True)))
