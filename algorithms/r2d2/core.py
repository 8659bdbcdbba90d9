"""R2D2's pure learning functions (Kapturowski et al., 2019, "Recurrent Experience Replay in
Distributed Reinforcement Learning"): value rescaling, n-step double-Q TD errors over stored
sequences with burn-in, the sequences' priorities, and the loss.

Everything is time-major ``[T, B]`` and written for one learner step, so Ray mode's learner
can call the same loss on replayed sequences.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import chex
import jax
import jax.numpy as jnp
import rlax

from jaxflow.algorithms.dqn.learning import n_step_targets
from jaxflow.policies import Policy, q_value_outputs
from jaxflow.policies.sequences import STARTS_FIELD, STATE_FIELD

Array = jax.Array


def rescale(x: Array, eps: float) -> Array:
    """The paper's h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x (Pohlen et al., 2018), which is
    rlax's ``signed_hyperbolic``.

    Example:
        >>> round(float(rescale(jnp.float32(3.0), 1e-3)), 6)  # sqrt(4) - 1 + 0.003
        1.003
    """
    return rlax.signed_hyperbolic(x, eps)


def unrescale(x: Array, eps: float) -> Array:
    """h's exact inverse, sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)
    (Pohlen et al., 2018, Proposition A.2), which is rlax's ``signed_parabolic``."""
    return rlax.signed_parabolic(x, eps)


def rescaled_q_outputs(q: Array, legal: Array | None = None, *, eps: float) -> tuple[Array, Array]:
    """The policy's reading of rescaled Q-values ``h(Q) [B, A]``: greedy inputs ``h(Q)`` (h is
    increasing, so the argmax is Q's) and the value ``h^-1(max_a h(Q))`` in return units, what
    a truncated episode's last reward is bootstrapped with."""
    q, value = q_value_outputs(q, legal)
    return q, unrescale(value, eps)


def sequence_td_errors(
    q_tm1: Array,
    a_tm1: Array,
    r_t: Array,
    discount_t: Array,
    q_t_selector: Array,
    q_t_value: Array,
    n: int,
    eps: float,
) -> Array:
    """TD errors ``[T - 1, B]`` of transformed n-step double Q-learning along ``[T, B]`` sequences.

    ``q_tm1`` (online) and ``q_t_value`` (target) are rescaled Q-values ``[T, B, A]`` of each
    step's observation, ``a_tm1``, ``r_t`` and ``discount_t`` (gamma, or 0 where the episode
    ended with that step) each step's action, reward and discount. For each step t < T - 1,
    with k = min(n, T - 1 - t) and the double-Q action a* = argmax_a q_t_selector[t + k]:
    ``target = h(sum_{i<k} (prod_{j<i} discount_{t+j}) r_{t+i} + prod_{j<k} discount_{t+j}
    h^-1(q_t_value[t + k, a*]))``; the target carries no gradient.
    """
    chex.assert_rank([q_tm1, a_tm1, r_t, discount_t, q_t_selector, q_t_value], [3, 2, 2, 2, 3, 3])
    chex.assert_equal_shape([q_tm1, q_t_selector, q_t_value])
    chex.assert_equal_shape([a_tm1, r_t, discount_t])
    g, bootstrap_discount, k = n_step_targets(r_t[:-1], discount_t[:-1], n)
    a_star = jnp.argmax(q_t_selector, axis=-1)
    v = jnp.take_along_axis(q_t_value, a_star[..., None], axis=-1)[..., 0]  # [T, B]
    steps = jnp.arange(g.shape[0])[:, None] + k
    v_boot = jnp.take_along_axis(v, steps, axis=0)
    target = rescale(g + bootstrap_discount * unrescale(v_boot, eps), eps)
    q_taken = jnp.take_along_axis(q_tm1[:-1], a_tm1[:-1, :, None], axis=-1)[..., 0]
    return jax.lax.stop_gradient(target) - q_taken


def sequence_priorities(td: Array, eta: float) -> Array:
    """Each sequence's priority ``eta * max_t |td| + (1 - eta) * mean_t |td|`` ``[B]`` of
    TD errors ``[T, B]`` (the paper's eta = 0.9).

    Example:
        >>> [round(p, 6) for p in sequence_priorities(jnp.array([[1.0], [-3.0]]), 0.9).tolist()]  # 0.9*3 + 0.1*2
        [2.9]
    """
    chex.assert_rank(td, 2)
    abs_td = jnp.abs(td)
    return eta * abs_td.max(axis=0) + (1.0 - eta) * abs_td.mean(axis=0)


def burned_in(policy: Policy, params: Any, state: Any, obs: Array, starts: Array) -> Any:
    """The state after unrolling the burn-in steps ``obs [burn_in, B, ...]`` from the stored
    ``state``, without gradient (the paper's burn-in: it only warms the state up)."""
    if obs.shape[0] == 0:
        return state
    return jax.lax.stop_gradient(policy.unroll(params, state, obs, starts)[0])


def loss(
    params: Any, batch: Mapping[str, Array], rng: Array, target_params: Any, *, policy: Policy, config: Any
) -> tuple[Array, dict[str, Array]]:
    """The importance-weighted loss of replayed sequences ``[N, L, ...]`` (batch-major, as
    the replay samples them, with each sequence's start ``policy_state`` and its ``weights``):
    the online and the target network each unroll the ``burn_in`` steps from the stored state
    without gradient, then the trace; the loss is the mean over sequences of ``weights`` times
    the mean over steps of ``td^2 / 2``. ``td_error`` is each sequence's priority
    (:func:`sequence_priorities`); the state is reset where an episode starts."""
    del rng
    tm = {k: v.swapaxes(0, 1) for k, v in batch.items() if k not in (STATE_FIELD, "weights")}
    burn, state = config.burn_in, batch[STATE_FIELD]
    obs, starts = tm["obs"], tm[STARTS_FIELD]

    def trace_q(p: Any) -> Array:
        start = burned_in(policy, p, state, obs[:burn], starts[:burn])
        return policy.unroll(p, start, obs[burn:], starts[burn:])[1]

    q, q_target = trace_q(params), trace_q(target_params)
    a_tm1, r_t = tm["actions"][burn:], tm["rewards"][burn:]
    discount_t = tm["discounts"][burn:]  # gamma, or 0 where the episode ended: rollouts store gamma in it
    td = sequence_td_errors(q, a_tm1, r_t, discount_t, q, q_target, config.n_step, config.value_rescaling_eps)
    total = jnp.mean(batch["weights"] * jnp.mean(0.5 * td**2, axis=0))
    q_taken = jnp.take_along_axis(q, a_tm1[..., None], axis=-1)
    return total, {
        "td_error": sequence_priorities(td, config.priority_eta),
        "mean_q": jnp.mean(q_taken),
        "mean_abs_td_error": jnp.mean(jnp.abs(td)),
    }
