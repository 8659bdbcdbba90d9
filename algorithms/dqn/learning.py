"""DQN's pure learning functions: n-step targets and initial priorities on the workers, replay
rows, (double) Q-learning TD errors and the importance-weighted loss (distributional with
C51 or QR-DQN).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import rlax

from jaxflow.algorithms.dqn.config import DQNConfig
from jaxflow.algorithms.dqn.distributional import categorical_losses, quantile_losses
from jaxflow.config import OffPolicyConfig
from jaxflow.policies import Policy, categorical_support
from jaxflow.replay.buffer import ReplayRows
from jaxflow.replay.transitions import encode_fragment

Array = jax.Array


def n_step_targets(r_t: Array, discount_t: Array, n: int) -> tuple[Array, Array, Array]:
    """n-step returns of a time-major ``[T, B]`` fragment (Sutton & Barto, 2018, Section 7.1).

    ``discount_t`` is ``gamma`` or 0 where an episode ended. For each t, with
    ``k = min(n, T - t)``: ``G_t = sum_{i<k} (prod_{j<i} discount_{t+j}) r_{t+i}``, the
    bootstrap discount ``prod_{j<k} discount_{t+j}`` (0 once the episode ended) and ``k``,
    the offset of the observation to bootstrap from. Steps near the end of the fragment
    use fewer rewards, so no transition waits for the next fragment.
    """
    chex.assert_rank([r_t, discount_t], 2)
    chex.assert_equal_shape([r_t, discount_t])
    T = r_t.shape[0]
    t = jnp.arange(T)[:, None]
    g, acc = jnp.zeros_like(r_t), jnp.ones_like(discount_t)
    for i in range(n):
        valid = t + i < T
        r_i = jnp.roll(r_t, -i, axis=0)
        d_i = jnp.roll(discount_t, -i, axis=0)
        g = g + jnp.where(valid, acc * r_i, 0.0)
        acc = jnp.where(valid, acc * d_i, acc)
    k = jnp.broadcast_to(jnp.minimum(n, T - t), r_t.shape).astype(jnp.int32)
    return g, acc, k


def postprocess(traj: Mapping[str, Array], config: DQNConfig) -> dict[str, Array]:
    """Worker-side: n-step targets and initial priorities ``|TD error|`` computed with the
    worker's own Q-network (Horgan et al., 2018, Ape-X: new transitions enter the replay
    with a useful priority instead of the maximum). The observations pass through as they
    came (``obs [T]`` and ``last_obs``), so a rollout worker keeps them out of the compiled
    call (:class:`~jaxflow.rollout.postprocess.HostPostprocess`)."""
    g, discount, k = n_step_targets(traj["rewards"], traj["discounts"], config.n_step)
    max_q = jnp.concatenate([traj["values"], traj["bootstrap_value"][None]], axis=0)
    max_q_boot = jnp.take_along_axis(max_q, jnp.arange(g.shape[0])[:, None] + k, axis=0)
    q_taken = jnp.take_along_axis(traj["dist_inputs"], traj["actions"][..., None], axis=-1)[..., 0]
    td = g + discount * max_q_boot - q_taken
    return replay_fields(traj, g, discount, k, jnp.abs(td) + config.prioritized_replay_eps)


def replay_fields(
    traj: Mapping[str, Array], g: Array, discount: Array, k: Array, priorities: Array
) -> dict[str, Array]:
    """What a replay algorithm's postprocess returns: the observations as they came, the
    actions, the n-step returns ``g``, bootstrap discounts and offsets ``k``, and the initial priorities."""
    return dict(
        obs=traj["obs"],
        last_obs=traj["last_obs"],
        actions=traj["actions"],
        rewards=g,
        discounts=discount,
        next_offsets=k,
        priorities=priorities,
    )


def encode(traj: Mapping[str, np.ndarray], config: OffPolicyConfig) -> ReplayRows:
    """Worker-side, on the host: packs the fragment into replay rows, each observation once."""
    obs = np.concatenate([traj["obs"], traj["last_obs"][None]])
    rows, priorities = encode_fragment(
        obs,
        traj["actions"],
        traj["rewards"],
        traj["discounts"],
        traj["next_offsets"],
        traj["priorities"],
        frame_stack=config.frame_stack,
    )
    return ReplayRows(rows, priorities, config.frame_stack)


def td_errors(
    q_tm1: Array, a_tm1: Array, r_t: Array, discount_t: Array, q_t_value: Array, q_t_selector: Array, double_q: bool
) -> Array:
    """Per-transition TD errors ``[N]`` of (double) Q-learning with n-step returns ``r_t``
    and bootstrap discounts ``discount_t`` (van Hasselt et al., 2016, "Deep Reinforcement
    Learning with Double Q-learning"); targets carry no gradient."""
    chex.assert_rank([q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector], [2, 1, 1, 1, 2, 2])
    if double_q:
        return jax.vmap(rlax.double_q_learning)(q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector)
    return jax.vmap(rlax.q_learning)(q_tm1, a_tm1, r_t, discount_t, q_t_value)


def loss(
    params: Any, batch: Mapping[str, Array], rng: Array, target_params: Any, *, policy: Policy, config: DQNConfig
) -> tuple[Array, dict[str, Array]]:
    """Importance-weighted loss of the replayed transitions: the Huber loss of the TD errors,
    or with ``config.c51`` / ``config.qr`` the distributional loss
    (:mod:`~jaxflow.algorithms.dqn.distributional`). ``td_error`` is the per-sample TD error
    (or distributional loss), for the new replay priorities; ``mean_abs_td_error`` is that
    of the mean Q-values in every case, and ``mean_q`` the mean Q-value of the replayed
    actions. The Q-values are the policy's: with an action mask, the bootstrap's max (and
    double Q-learning's argmax) runs over the next observation's legal actions. A noisy
    network draws independent noise for the online, selector and target passes (``rng``)."""
    k_tm1, k_sel, k_t = jax.random.split(rng, 3) if policy.noisy else (None, None, None)

    def forward(p: Any, obs: Array, key: Array | None) -> tuple[Any, Array]:  # network outputs, masked Q [B, A]
        out = policy.network_outputs(p, obs, key)
        return out, policy.outputs(out, policy.legal_actions(obs))[0]

    out_tm1, q_tm1 = forward(params, batch["obs"], k_tm1)
    out_t, q_t_value = forward(target_params, batch["next_obs"], k_t)
    out_sel, q_t_selector = forward(params, batch["next_obs"], k_sel) if config.double_q else (out_t, q_t_value)
    a_tm1, r_t, discount_t = batch["actions"], batch["rewards"], batch["discounts"]
    td = td_errors(q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector, config.double_q)
    if config.c51:
        atoms = categorical_support(config.v_min, config.v_max, config.num_atoms)
        per_sample = categorical_losses(out_tm1, a_tm1, r_t, discount_t, out_t, q_t_selector, atoms)
    elif config.qr:
        legal_t = policy.legal_actions(batch["next_obs"])
        per_sample = quantile_losses(out_tm1, a_tm1, r_t, discount_t, out_t, out_sel, legal_t, config.huber_delta)
    else:
        per_sample = rlax.huber_loss(td, config.huber_delta)
    total = jnp.mean(batch["weights"] * per_sample)
    priority = per_sample if config.c51 or config.qr else td
    q_taken = jnp.take_along_axis(q_tm1, a_tm1[:, None], axis=-1)[:, 0]
    return total, {"td_error": priority, "mean_q": jnp.mean(q_taken), "mean_abs_td_error": jnp.mean(jnp.abs(td))}
