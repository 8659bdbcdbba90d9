"""SAC's pure learning functions (Haarnoja et al., 2018, "Soft Actor-Critic Algorithms and
Applications"): the soft TD target of twin critics, the reparameterized actor loss and the
automatic entropy temperature; n-step targets on the workers come from DQN."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import chex
import jax
import jax.numpy as jnp

from jaxflow.algorithms.dqn import n_step_targets, replay_fields
from jaxflow.algorithms.sac.config import SACConfig
from jaxflow.networks import ActorCritics
from jaxflow.policies import Policy

Array = jax.Array


def soft_td_target(r_t: Array, discount_t: Array, q_t: Array, logp_t: Array, alpha: Array) -> Array:
    """``y = r_t + discount_t * (min_i Q_i'(s_t, a_t) - alpha * log pi(a_t | s_t))`` with
    ``a_t ~ pi(s_t)``: the soft Bellman target of clipped double Q-learning; no gradient.
    ``q_t`` is ``[num_critics, B]``, the rest ``[B]``."""
    chex.assert_rank([r_t, discount_t, q_t, logp_t], [1, 1, 2, 1])
    return jax.lax.stop_gradient(r_t + discount_t * (q_t.min(axis=0) - alpha * logp_t))


def critic_loss(q_tm1: Array, y: Array, weights: Array) -> tuple[Array, Array]:
    """``0.5 * E[w * sum_i (Q_i(s, a) - y)^2]`` of every critic ``q_tm1 [num_critics, B]``,
    and the TD errors averaged over the critics ``[B]`` (for priorities)."""
    chex.assert_rank([q_tm1, y, weights], [2, 1, 1])
    td = q_tm1 - y[None]
    return 0.5 * jnp.mean(weights * jnp.sum(td**2, axis=0)), td.mean(axis=0)


def actor_loss(q_pi: Array, logp_pi: Array, alpha: Array) -> Array:
    """``E[alpha * log pi(a|s) - min_i Q_i(s, a)]``, ``a ~ pi(s)`` reparameterized; ``q_pi`` is
    ``[num_critics, B]`` from critics that take no gradient here."""
    chex.assert_rank([q_pi, logp_pi], [2, 1])
    return jnp.mean(jax.lax.stop_gradient(alpha) * logp_pi - q_pi.min(axis=0))


def temperature_loss(log_alpha: Array, logp_pi: Array, target_entropy: float) -> Array:
    """``-E[log_alpha * (log pi(a|s) + target_entropy)]``: raises alpha while the policy's
    entropy is below the target, lowers it above."""
    return -jnp.mean(log_alpha * jax.lax.stop_gradient(logp_pi + target_entropy))


def postprocess(traj: Mapping[str, Array], config: SACConfig) -> dict[str, Array]:
    """Worker-side: n-step targets, and the same initial priority for every transition
    (uniform replay; with ``prioritized_replay``, replay's own TD errors take over)."""
    g, discount, k = n_step_targets(traj["rewards"], traj["discounts"], config.n_step)
    return replay_fields(traj, g, discount, k, jnp.ones_like(g))


def actor_inputs(policy: Policy, params: Any, obs: Array) -> Array:
    """The actor's distribution inputs ``[B, D]``."""
    return cast(Array, policy.network.apply(params, obs, method=ActorCritics.actor))


def critic_values(policy: Policy, params: Any, obs: Array, actions: Array) -> Array:
    """Every critic's ``Q_i(s, a)``, ``[num_critics, B]``."""
    return cast(Array, policy.network.apply(params, obs, actions, method=ActorCritics.critics))


def loss(
    params: Any, batch: Mapping[str, Array], rng: Array, target_params: Any, *, policy: Policy, config: SACConfig
) -> tuple[Array, dict[str, Array]]:
    """Critic, actor and temperature losses summed: each term's gradient reaches only its
    own parameters (targets, the critics under the actor loss and the log-probs under the
    temperature loss are stopped), so one Adam over all of them is three Adams."""
    dist = policy.distribution
    k_next, k_pi = jax.random.split(rng)
    log_alpha = params["params"]["log_alpha"]
    alpha = jnp.exp(log_alpha)
    a_t, logp_t = dist.sample(k_next, actor_inputs(policy, params, batch["next_obs"]))
    q_t = critic_values(policy, target_params, batch["next_obs"], a_t)
    y = soft_td_target(batch["rewards"], batch["discounts"], q_t, logp_t, jax.lax.stop_gradient(alpha))
    q_tm1 = critic_values(policy, params, batch["obs"], batch["actions"])
    q_loss, td = critic_loss(q_tm1, y, batch["weights"])
    a_pi, logp_pi = dist.sample(k_pi, actor_inputs(policy, params, batch["obs"]))
    q_pi = critic_values(policy, jax.lax.stop_gradient(params), batch["obs"], a_pi)
    pi_loss = actor_loss(q_pi, logp_pi, alpha)
    target_entropy = -float(dist.action_shape[0]) if config.target_entropy is None else config.target_entropy
    alpha_loss = temperature_loss(log_alpha, logp_pi, target_entropy)
    return q_loss + pi_loss + alpha_loss, {
        "td_error": td,
        "critic_loss": q_loss,
        "actor_loss": pi_loss,
        "alpha": alpha,
        "entropy": -jnp.mean(logp_pi),
        "mean_q": jnp.mean(q_tm1),
    }
