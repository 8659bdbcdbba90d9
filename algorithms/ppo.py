"""PPO: proximal policy optimization with the clipped surrogate objective (Schulman et
al., 2017, "Proximal Policy Optimization Algorithms"), GAE advantages, optional value
clipping, and minibatch epochs. With ``use_lstm`` (device or Ray mode) the policy is recurrent: the
loss unrolls it over each fragment's sequences from their stored start states, and
minibatches hold whole sequences (:mod:`jaxflow.policies.sequences`).
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
    StandardizeFields,
    TrainOneStep,
    register_algorithm,
)
from jaxflow.algorithms.a2c import postprocess
from jaxflow.config import OptimizerConfig, RolloutConfig
from jaxflow.config.fields import NON_NEGATIVE, POSITIVE, SIZE, UNIT, param, require
from jaxflow.envs import BRAX_PREFIX, GYMNAX_PREFIX
from jaxflow.ondevice.spec import flat_batch
from jaxflow.ops.multiagent_ops import on_policy_flow
from jaxflow.ops.rollout_ops import bulk_sync_env_steps, standardize_fields
from jaxflow.policies import Policy
from jaxflow.policies.sequences import policy_outputs, sequence_batch

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class PPOConfig(CommonConfig):
    """PPO settings (plus :class:`~jaxflow.config.CommonConfig`)."""

    on_policy = True
    learner_group = True
    recurrent_modes: ClassVar[tuple[str, ...]] = ("device", "ray")
    loss_fields = ("clip_eps", "vf_clip", "vf_coef", "ent_coef")

    rollout: RolloutConfig = param(
        None, factory=lambda: RolloutConfig(num_envs_per_worker=16, rollout_fragment_length=32)
    )
    """Rollout workers (see :class:`~jaxflow.config.RolloutConfig`); PPO's step 16 envs each, 32-step fragments."""
    train_batch_size: int = param(1024, SIZE)
    """Env steps per training iteration; fragments are joined until there are at least this many."""
    minibatch_size: int = param(256, SIZE)
    """Samples per SGD step."""
    num_epochs: int = param(8, SIZE)
    """Passes over each train batch."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=1e-3))
    """Adam (see :class:`~jaxflow.config.OptimizerConfig`); PPO's learning rate is 1e-3."""
    clip_eps: float = param(0.2, POSITIVE)
    """Clipping of the probability ratio, epsilon in the paper; must be > 0."""
    vf_clip: float = param(0.0, NON_NEGATIVE)
    """Clip value updates to this distance from the behaviour values (0: no value clipping)."""
    gae_lambda: float = param(0.95, UNIT)
    """GAE's lambda."""
    vf_coef: float = param(0.5, NON_NEGATIVE)
    """Weight of the value loss."""
    ent_coef: float = param(0.0, NON_NEGATIVE)
    """Weight of the entropy bonus."""

    def __post_init__(self) -> None:
        super().__post_init__()
        # Only Ray mode trains on train_batch_size; device mode trains on num_envs x
        # rollout_fragment_length, and its program checks the minibatch against that.
        if self.mode == "ray" or (self.mode == "auto" and not self.env.startswith((GYMNAX_PREFIX, BRAX_PREFIX))):
            require(
                self.minibatch_size <= self.train_batch_size,
                f"minibatch_size ({self.minibatch_size}) must be <= train_batch_size ({self.train_batch_size}).",
            )
        require(
            not self.use_lstm or self.minibatch_size >= self.rollout.rollout_fragment_length,
            f"{type(self).__name__}.use_lstm=True: a minibatch holds minibatch_size // rollout_fragment_length whole "
            f"sequences, so minibatch_size ({self.minibatch_size}) must be >= rollout_fragment_length "
            f"({self.rollout.rollout_fragment_length}).",
        )


def sgd_settings(config: PPOConfig) -> tuple[int, int]:
    """Epochs and minibatch size: samples, or with ``use_lstm`` whole sequences of
    ``rollout_fragment_length`` steps (the batch's leading axis is then the sequence)."""
    if config.use_lstm:
        return config.num_epochs, config.minibatch_size // config.rollout.rollout_fragment_length
    return config.num_epochs, config.minibatch_size


def loss(
    params: Any, batch: Mapping[str, Array], rng: Array, *, policy: Policy, config: Any
) -> tuple[Array, dict[str, Array]]:
    """Clipped surrogate + (optionally clipped) value loss - entropy bonus, on a flat batch
    or, for a recurrent policy, on whole sequences (see :func:`~jaxflow.policies.sequences.policy_outputs`)."""
    del rng
    inputs, v, batch = policy_outputs(policy, params, batch)
    chex.assert_equal_shape([v, batch["value_targets"], batch["logp"]])
    dist = policy.distribution
    log_ratio = dist.log_prob(inputs, batch["actions"]) - batch["logp"]
    ratio = jnp.exp(log_ratio)
    pg_loss = rlax.clipped_surrogate_pg_loss(ratio, batch["advantages"], config.clip_eps)
    value_err = jnp.square(v - batch["value_targets"])
    if config.vf_clip > 0:
        v_clipped = batch["values"] + jnp.clip(v - batch["values"], -config.vf_clip, config.vf_clip)
        value_err = jnp.maximum(value_err, jnp.square(v_clipped - batch["value_targets"]))
    value_loss = 0.5 * jnp.mean(value_err)
    entropy = jnp.mean(dist.entropy(inputs))
    total = pg_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    return total, {
        "policy_loss": pg_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean(ratio - 1.0 - log_ratio),
        "clip_fraction": jnp.mean(jnp.abs(ratio - 1.0) > config.clip_eps),
    }


def train_flow(rollouts, learner, workers, config: PPOConfig):
    """PPO's sub-flow from a stream of on-policy fragments (all of a run's, or one policy's)."""
    # (1) join fragments into a train batch, standardize advantages
    batches = rollouts.combine(ConcatBatches(config.train_batch_size)).for_each(StandardizeFields(["advantages"]))
    # (2) minibatch SGD epochs on the learner's devices, then every worker gets the new weights
    return batches.for_each(TrainOneStep(learner)).for_each(BroadcastWeights(learner, workers))


def plan(workers, learner, config: PPOConfig):
    # all workers sample in lockstep, into PPO's sub-flow
    train = train_flow(ParallelRollouts(workers, mode="bulk_sync", to_learner=learner), learner, workers, config)
    return ReportMetrics(train, workers, config.min_env_steps_per_iteration)


def device_batch(traj: Mapping[str, Array], config: PPOConfig) -> dict[str, Array]:
    """Device mode's train batch: the fragment flattened (a recurrent policy's: as sequences),
    advantages standardized (the plan's (1))."""
    batch = sequence_batch(traj) if config.use_lstm else flat_batch(traj, config)
    return standardize_fields(batch, ["advantages"])


PPO = register_algorithm(
    AlgorithmSpec(
        "PPO",
        PPOConfig,
        loss,
        plan,
        postprocess,
        learner=LearnerHooks(sgd=sgd_settings, train_batch_env_steps=bulk_sync_env_steps),
        run=RunHooks(device=DeviceSpec(prepare=device_batch), flow=on_policy_flow(train_flow)),
    )
)
