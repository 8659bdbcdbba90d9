"""A2C: synchronous advantage actor-critic (Mnih et al., 2016, "Asynchronous Methods
for Deep Reinforcement Learning", the synchronous variant), with GAE (Schulman et
al., 2016, "High-Dimensional Continuous Control Using Generalized Advantage Estimation").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import chex
import jax
import jax.numpy as jnp
import rlax

from jaxflow import (
    AlgorithmSpec,
    BroadcastWeights,
    CommonConfig,
    ConcatBatches,
    DeviceSpec,
    LearnerHooks,
    ParallelRollouts,
    ReportMetrics,
    RunHooks,
    TrainOneStep,
    register_algorithm,
)
from jaxflow.config import OptimizerConfig, RolloutConfig
from jaxflow.config.fields import NON_NEGATIVE, SIZE, UNIT, param, require
from jaxflow.ops.multiagent_ops import on_policy_flow
from jaxflow.ops.rollout_ops import bulk_sync_env_steps
from jaxflow.policies import Policy
from jaxflow.policies.sequences import SEQUENCE_FIELDS, policy_outputs

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class A2CConfig(CommonConfig):
    """A2C settings (plus :class:`~jaxflow.config.CommonConfig`)."""

    on_policy = True
    learner_group = True
    recurrent_modes: ClassVar[tuple[str, ...]] = ("ray",)
    loss_fields = ("vf_coef", "ent_coef")

    rollout: RolloutConfig = param(None, factory=lambda: RolloutConfig(rollout_fragment_length=16))
    """Rollout workers (see :class:`~jaxflow.config.RolloutConfig`); A2C's fragments are 16 steps."""
    train_batch_size: int = param(256, SIZE)
    """Env steps per gradient step; fragments are joined until there are at least this many."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=2e-3))
    """Adam (see :class:`~jaxflow.config.OptimizerConfig`); A2C's learning rate is 2e-3."""
    gae_lambda: float = param(0.95, UNIT)
    """GAE's lambda (1 gives n-step returns)."""
    vf_coef: float = param(0.5, NON_NEGATIVE)
    """Weight of the value loss."""
    ent_coef: float = param(0.01, NON_NEGATIVE)
    """Weight of the entropy bonus."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.train_batch_size >= self.rollout.rollout_fragment_length,
            f"train_batch_size ({self.train_batch_size}) must be >= rollout_fragment_length "
            f"({self.rollout.rollout_fragment_length}).",
        )


def gae(r_t: Array, discount_t: Array, v_t: Array, bootstrap_value: Array, lambda_: float) -> tuple[Array, Array]:
    """GAE advantages and value targets of time-major ``[T, B]`` arrays (Schulman et al., 2016).

    ``discount_t`` is 0 where an episode ended; a truncation's bootstrap value is
    already in its reward (see ``RolloutWorker.sample``).
    """
    chex.assert_rank([r_t, discount_t, v_t, bootstrap_value], [2, 2, 2, 1])
    chex.assert_equal_shape([r_t, discount_t, v_t])
    values = jnp.concatenate([v_t, bootstrap_value[None]], axis=0)
    adv_t = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=(1, 1, None, 1), out_axes=1)(
        r_t, discount_t, lambda_, values
    )
    return adv_t, adv_t + v_t


def postprocess(traj: Mapping[str, Array], config: Any) -> dict[str, Array]:
    """Worker-side: adds ``advantages`` and ``value_targets``; keeps what the losses read (and
    a recurrent policy's sequence fields, :data:`~jaxflow.policies.sequences.SEQUENCE_FIELDS`)."""
    adv, targets = gae(traj["rewards"], traj["discounts"], traj["values"], traj["bootstrap_value"], config.gae_lambda)
    keep = ("obs", "actions", "logp", "values", *(k for k in SEQUENCE_FIELDS if k in traj))
    return dict({k: traj[k] for k in keep}, advantages=adv, value_targets=targets)


def loss(
    params: Any, batch: Mapping[str, Array], rng: Array, *, policy: Policy, config: Any
) -> tuple[Array, dict[str, Array]]:
    """Advantage actor-critic loss on a flat batch (a recurrent policy's: on whole sequences,
    see :func:`~jaxflow.policies.sequences.policy_outputs`): policy gradient + value regression - entropy."""
    del rng
    inputs, v, batch = policy_outputs(policy, params, batch)
    chex.assert_equal_shape([v, batch["value_targets"]])
    dist = policy.distribution
    pg_loss = -jnp.mean(dist.log_prob(inputs, batch["actions"]) * jax.lax.stop_gradient(batch["advantages"]))
    value_loss = 0.5 * jnp.mean(jnp.square(batch["value_targets"] - v))
    entropy = jnp.mean(dist.entropy(inputs))
    total = pg_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    return total, {"policy_loss": pg_loss, "value_loss": value_loss, "entropy": entropy}


def train_flow(rollouts, learner, workers, config: A2CConfig):
    """A2C's sub-flow from a stream of on-policy fragments (all of a run's, or one policy's)."""
    # (1) join fragments into a train batch; (2) one gradient step, then every worker gets the new weights
    batches = rollouts.combine(ConcatBatches(config.train_batch_size))
    return batches.for_each(TrainOneStep(learner)).for_each(BroadcastWeights(learner, workers))


def plan(workers, learner, config: A2CConfig):
    # all workers sample in lockstep with the current weights, into A2C's sub-flow
    train = train_flow(ParallelRollouts(workers, mode="bulk_sync", to_learner=learner), learner, workers, config)
    return ReportMetrics(train, workers, config.min_env_steps_per_iteration)


A2C = register_algorithm(
    AlgorithmSpec(
        "A2C",
        A2CConfig,
        loss,
        plan,
        postprocess,
        learner=LearnerHooks(train_batch_env_steps=bulk_sync_env_steps),
        run=RunHooks(device=DeviceSpec(), flow=on_policy_flow(train_flow)),
    )
)
