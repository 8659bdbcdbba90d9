"""APPO: asynchronous PPO, IMPALA's actors and V-trace targets with PPO's clipped surrogate
(Schulman et al., 2017, "Proximal Policy Optimization Algorithms", over Espeholt et al.,
2018's V-trace). IMPALA's sequence evaluation, V-trace targets and plan are imported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import rlax

from jaxflow import AlgorithmSpec, LearnerHooks, RunHooks, register_algorithm
from jaxflow.algorithms.impala import IMPALA, IMPALAConfig, evaluate_sequences, plan, postprocess, vtrace_targets
from jaxflow.config.fields import POSITIVE, SIZE, param, require
from jaxflow.policies import Policy

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class APPOConfig(IMPALAConfig):
    """APPO settings: IMPALA's, plus PPO's clipping and SGD passes over each train batch."""

    loss_fields = ("vf_coef", "ent_coef", "clip_eps")

    clip_eps: float = param(0.2, POSITIVE)
    """Clipping of the ratio between the current and the behaviour policy."""
    num_epochs: int = param(2, SIZE)
    """Passes over each train batch."""
    minibatch_sequences: int = param(8, SIZE)
    """Fragments (sequences of rollout_fragment_length steps) per SGD step."""

    def __post_init__(self) -> None:
        super().__post_init__()
        sequences = -(-self.train_batch_size // self.rollout.rollout_fragment_length)
        require(
            self.minibatch_sequences <= sequences,
            f"minibatch_sequences ({self.minibatch_sequences}) must be <= the {sequences} sequences of a train batch.",
        )


def loss(
    params: Any, batch: Mapping[str, Array], rng: Array, *, policy: Policy, config: APPOConfig
) -> tuple[Array, dict[str, Array]]:
    """Clipped surrogate on V-trace advantages + value regression to V-trace targets -
    entropy bonus; the ratio is between the current policy and the actors' behaviour policy."""
    del rng
    logp_t, entropy_t, values = evaluate_sequences(params, batch, policy)
    vs, adv, log_rho = vtrace_targets(batch, logp_t, values, config)
    ratio = jnp.exp(log_rho)
    pg_loss = rlax.clipped_surrogate_pg_loss(ratio.reshape(-1), adv.reshape(-1), config.clip_eps)
    value_loss = 0.5 * jnp.mean(jnp.square(vs - values[:-1]))
    entropy = jnp.mean(entropy_t)
    total = pg_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    return total, {
        "policy_loss": pg_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "clip_fraction": jnp.mean(jnp.abs(ratio - 1.0) > config.clip_eps),
    }


APPO = register_algorithm(
    AlgorithmSpec(
        "APPO",
        APPOConfig,
        loss,
        plan,
        postprocess,
        learner=LearnerHooks(sgd=lambda c: (c.num_epochs, c.minibatch_sequences)),
        workers=IMPALA.workers,
        run=RunHooks(device=IMPALA.run.device),
    )
)
