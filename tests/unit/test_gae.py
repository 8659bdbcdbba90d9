"""GAE (algorithms.a2c.gae) on time-major [T, B] arrays against hand and numpy references."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from jaxflow.algorithms.a2c import gae


def numpy_gae(r, d, v, bootstrap, lam):
    """Plain backward recursion, written independently of rlax:
    delta_t = r_t + d_t V_{t+1} - V_t,  A_t = delta_t + d_t * lam * A_{t+1}."""
    r, d, v, bootstrap = (np.asarray(x, np.float64) for x in (r, d, v, bootstrap))
    T = r.shape[0]
    adv = np.zeros_like(r)
    next_value, next_adv = bootstrap, np.zeros_like(bootstrap)
    for t in reversed(range(T)):
        delta = r[t] + d[t] * next_value - v[t]
        next_adv = delta + d[t] * lam * next_adv
        adv[t] = next_adv
        next_value = v[t]
    return adv, adv + v


def test_hand_checked_example_with_termination_in_the_middle():
    # T=3, B=1, gamma 0.9, the episode ends at t=1 (discount 0), lambda 0.95.
    # values V = [0.5, 1.0, 1.5], bootstrap V_3 = 2.0, rewards r = [1, 2, 3]
    #   delta_2 = 3 + 0.9*2.0 - 1.5 = 3.3              A_2 = 3.3
    #   delta_1 = 2 + 0.0*1.5 - 1.0 = 1.0              A_1 = 1.0 + 0*0.95*3.3   = 1.0
    #   delta_0 = 1 + 0.9*1.0 - 0.5 = 1.4              A_0 = 1.4 + 0.9*0.95*1.0 = 2.255
    # targets = A + V = [2.755, 2.0, 4.8]; the termination at t=1 stops A_2 and
    # V_2 leaking into A_1, which is what the 0 discount must do.
    r = np.array([[1.0], [2.0], [3.0]], np.float32)
    d = np.array([[0.9], [0.0], [0.9]], np.float32)
    v = np.array([[0.5], [1.0], [1.5]], np.float32)
    boot = np.array([2.0], np.float32)
    adv, targets = gae(r, d, v, boot, 0.95)
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [2.255, 1.0, 3.3], atol=1e-6, rtol=0)
    np.testing.assert_allclose(np.asarray(targets)[:, 0], [2.755, 2.0, 4.8], atol=1e-6, rtol=0)


def _random_inputs(seed: int, T: int = 7, B: int = 5):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=(T, B)).astype(np.float32)
    d = (0.97 * (rng.random((T, B)) > 0.25)).astype(np.float32)  # ~25% episode ends
    v = rng.normal(size=(T, B)).astype(np.float32)
    boot = rng.normal(size=(B,)).astype(np.float32)
    # The comparison is only meaningful if some ends (and some non-ends) occur.
    assert (d == 0).any() and (d > 0).any()
    return r, d, v, boot


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
def test_matches_numpy_backward_recursion(jit, lam):
    r, d, v, boot = _random_inputs(seed=int(lam * 100) + 1)
    fn = jax.jit(functools.partial(gae, lambda_=lam)) if jit else functools.partial(gae, lambda_=lam)
    adv, targets = fn(r, d, v, boot)
    ref_adv, ref_targets = numpy_gae(r, d, v, boot, lam)
    assert adv.shape == targets.shape == (7, 5)
    np.testing.assert_allclose(np.asarray(adv), ref_adv, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(targets), ref_targets, atol=1e-5, rtol=1e-5)


def test_lambda_zero_is_one_step_td_error_and_lambda_one_is_discounted_return():
    r, d, v, boot = _random_inputs(seed=3)
    adv0, _ = gae(r, d, v, boot, 0.0)
    next_v = np.concatenate([v[1:], boot[None]], axis=0)
    np.testing.assert_allclose(np.asarray(adv0), r + d * next_v - v, atol=1e-5)

    # lambda=1: targets are the bootstrapped discounted returns, independent of V_t.
    _, targets1 = gae(r, d, v, boot, 1.0)
    ret, g = np.zeros_like(r), boot.astype(np.float64)
    for t in reversed(range(r.shape[0])):
        g = r[t] + d[t] * g
        ret[t] = g
    np.testing.assert_allclose(np.asarray(targets1), ret, atol=1e-5)


def test_value_targets_are_advantages_plus_values():
    r, d, v, boot = _random_inputs(seed=11)
    adv, targets = gae(r, d, v, boot, 0.9)
    np.testing.assert_allclose(np.asarray(targets), np.asarray(adv) + v, atol=1e-6, rtol=0)


def test_rejects_wrong_ranks():
    r, d, v, boot = _random_inputs(seed=5)
    with pytest.raises(AssertionError):
        gae(r, d, v, boot[None], 0.9)  # bootstrap_value must be [B]
