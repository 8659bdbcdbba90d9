"""DQN's distributional losses: C51 (Bellemare et al., 2017, "A Distributional Perspective on
Reinforcement Learning") and QR-DQN (Dabney et al., 2018, "Distributional Reinforcement
Learning with Quantile Regression"), with n-step returns and double Q-learning's action
selection as Rainbow combines them (Hessel et al., 2018).

The per-sample loss is also the transition's new replay priority (Rainbow, Section 3:
C51's cross-entropy; QR-DQN's quantile Huber loss). A new transition enters the replay with
the workers' priority, the absolute n-step TD error of the mean Q-values (Ape-X's rule; the
workers see Q-values, not distributions), which is on another scale than the loss until its
first replay. Actions are selected by the networks'
mean Q-values as the policy reads them (:mod:`jaxflow.policies.distributional`), so the
bootstrap's argmax runs over the next observation's legal actions only.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import rlax

from jaxflow.policies import MASKED_LOGIT

Array = jax.Array


def categorical_target(r_t: Array, discount_t: Array, probs_t: Array, atoms: Array) -> Array:
    """C51's target distribution ``[B, N]``: the bootstrap distribution ``probs_t [B, N]``
    shifted to ``r + discount z`` and projected back on the support ``atoms [N]``
    (Bellemare et al., 2017, Algorithm 1), with ``rlax.categorical_l2_project``."""
    chex.assert_rank([r_t, discount_t, probs_t, atoms], [1, 1, 2, 1])
    shifted = r_t[:, None] + discount_t[:, None] * atoms[None, :]
    return jax.vmap(rlax.categorical_l2_project, in_axes=(0, 0, None))(shifted, probs_t, atoms)


def categorical_losses(
    logits_tm1: Array,
    a_tm1: Array,
    r_t: Array,
    discount_t: Array,
    logits_t: Array,
    q_t_selector: Array,
    atoms: Array,
) -> Array:
    """Per-transition cross-entropies ``[B]`` between the projected target (the target
    network's ``logits_t [B, A, N]`` at the action ``q_t_selector [B, A]`` picks) and the
    online ``logits_tm1 [B, A, N]`` at the taken action: ``rlax.categorical_double_q_learning``,
    which projects with ``rlax.categorical_l2_project`` (:func:`categorical_target`). The
    selector is the online network's masked mean Q for double Q-learning, the target's otherwise."""
    chex.assert_rank([logits_tm1, a_tm1, r_t, discount_t, logits_t, q_t_selector], [3, 1, 1, 1, 3, 2])
    loss = jax.vmap(rlax.categorical_double_q_learning, in_axes=(None, 0, 0, 0, 0, None, 0, 0))
    return loss(atoms, logits_tm1, a_tm1, r_t, discount_t, atoms, logits_t, q_t_selector)


def quantile_midpoints(num_quantiles: int) -> Array:
    """QR-DQN's quantile fractions ``tau_hat_i = (2 i + 1) / (2 N)``, the midpoints the
    quantiles estimate (Dabney et al., 2018, Lemma 2).

    Example:
        >>> quantile_midpoints(4).tolist()
        [0.125, 0.375, 0.625, 0.875]
    """
    return (jnp.arange(num_quantiles, dtype=jnp.float32) + 0.5) / num_quantiles


def quantile_losses(
    quantiles_tm1: Array,
    a_tm1: Array,
    r_t: Array,
    discount_t: Array,
    quantiles_t: Array,
    selector_t: Array,
    legal_t: Array | None,
    huber_delta: float,
) -> Array:
    """Per-transition quantile Huber losses ``[B]`` (Dabney et al., 2018, Eq. 10: summed over
    the online quantiles, averaged over the target's) with ``rlax.quantile_q_learning``; all
    distributions ``[B, A, N]``. ``selector_t``'s mean picks the bootstrap action, among the
    legal actions ``legal_t [B, A]`` (None: all): rlax takes the mean itself, so an illegal
    action's quantiles are set to :data:`~jaxflow.policies.MASKED_LOGIT` for the choice alone."""
    chex.assert_rank([quantiles_tm1, a_tm1, r_t, discount_t, quantiles_t, selector_t], [3, 1, 1, 1, 3, 3])
    if legal_t is not None:
        selector_t = jnp.where(legal_t[..., None], selector_t, MASKED_LOGIT)
    tau = quantile_midpoints(quantiles_tm1.shape[-1])

    def one(q_tm1: Array, a: Array, r: Array, d: Array, q_t: Array, sel: Array) -> Array:
        return rlax.quantile_q_learning(q_tm1.T, tau, a, r, d, sel.T, q_t.T, huber_delta)

    return jax.vmap(one)(quantiles_tm1, a_tm1, r_t, discount_t, quantiles_t, selector_t)
