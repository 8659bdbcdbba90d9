"""PPO and A2C losses against an independent numpy implementation.

A linear network defined here (the policy's ``apply``) makes the logits and values exact
functions of the test's own parameters, so the numpy reference sees the very same numbers.
"""

from __future__ import annotations

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow.algorithms import a2c, ppo
from jaxflow.algorithms.a2c import A2CConfig
from jaxflow.algorithms.ppo import PPOConfig
from jaxflow.policies import Categorical, Policy

N, D, A = 32, 3, 4


def apply_fn(params, obs):
    return obs @ params["W"] + params["b"], obs @ params["wv"]


# A categorical policy on the linear network (anything with ``apply`` serves as its network).
POLICY = Policy(types.SimpleNamespace(apply=apply_fn), Categorical(A), (D,))


def np_apply(params, obs):
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    obs = np.asarray(obs, np.float64)
    return obs @ p["W"] + p["b"], obs @ p["wv"]


def np_log_softmax(logits):
    z = logits - logits.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def np_entropy(logits):
    logp = np_log_softmax(logits)
    return -(np.exp(logp) * logp).sum(axis=-1)


def make_params(seed: int = 0):
    rng = np.random.default_rng(seed)
    return {
        "W": rng.normal(size=(D, A)).astype(np.float32),
        "b": rng.normal(size=(A,)).astype(np.float32),
        "wv": rng.normal(size=(D,)).astype(np.float32),
    }


def make_batch(params, seed: int = 1, logp_noise: float = 0.5):
    """Behaviour log-probs are the current ones plus noise, so ratios land on both
    sides of the clip range; behaviour values sit away from the current values, so
    value clipping changes some errors."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(N, D)).astype(np.float32)
    actions = rng.integers(0, A, size=N).astype(np.int32)
    logits, v = np_apply(params, obs)
    logp_now = np_log_softmax(logits)[np.arange(N), actions]
    return {
        "obs": obs,
        "actions": actions,
        "logp": (logp_now + rng.normal(scale=logp_noise, size=N)).astype(np.float32),
        "values": (v + rng.normal(scale=1.0, size=N)).astype(np.float32),
        "advantages": rng.normal(size=N).astype(np.float32),
        "value_targets": (v + rng.normal(scale=2.0, size=N)).astype(np.float32),
    }


def np_ppo_loss(params, batch, clip_eps, vf_clip, vf_coef, ent_coef):
    logits, v = np_apply(params, batch["obs"])
    logp = np_log_softmax(logits)[np.arange(N), batch["actions"]]
    ratio = np.exp(logp - batch["logp"])
    adv = batch["advantages"].astype(np.float64)
    surrogate = np.minimum(ratio * adv, np.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    pg = -surrogate.mean()
    targets = batch["value_targets"].astype(np.float64)
    err = (v - targets) ** 2
    if vf_clip > 0:
        old = batch["values"].astype(np.float64)
        v_clipped = old + np.clip(v - old, -vf_clip, vf_clip)
        err = np.maximum(err, (v_clipped - targets) ** 2)
    vf = 0.5 * err.mean()
    ent = np_entropy(logits).mean()
    return pg + vf_coef * vf - ent_coef * ent, dict(policy_loss=pg, value_loss=vf, entropy=ent, ratio=ratio)


def np_a2c_loss(params, batch, vf_coef, ent_coef):
    logits, v = np_apply(params, batch["obs"])
    logp = np_log_softmax(logits)[np.arange(N), batch["actions"]]
    pg = -(logp * batch["advantages"]).mean()
    vf = 0.5 * ((batch["value_targets"] - v) ** 2).mean()
    ent = np_entropy(logits).mean()
    return pg + vf_coef * vf - ent_coef * ent, dict(policy_loss=pg, value_loss=vf, entropy=ent)


def _loss_fn(module, config, jit):
    fn = functools.partial(module.loss, policy=POLICY, config=config)
    return jax.jit(fn) if jit else fn


RNG = jax.random.PRNGKey(0)
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("vf_clip", [0.0, 0.3])
def test_ppo_loss_matches_numpy(jit, vf_clip):
    config = PPOConfig(clip_eps=0.2, vf_clip=vf_clip, vf_coef=0.7, ent_coef=0.05)
    params = make_params()
    batch = make_batch(params)
    total, metrics = _loss_fn(ppo, config, jit)(params, batch, RNG)
    ref_total, ref = np_ppo_loss(params, batch, 0.2, vf_clip, 0.7, 0.05)

    # The data must exercise clipping from both sides, or a loss without clipping would pass.
    assert (ref["ratio"] > 1.2).any() and (ref["ratio"] < 0.8).any()
    np.testing.assert_allclose(float(metrics["policy_loss"]), ref["policy_loss"], **TOL)
    np.testing.assert_allclose(float(metrics["value_loss"]), ref["value_loss"], **TOL)
    np.testing.assert_allclose(float(metrics["entropy"]), ref["entropy"], **TOL)
    np.testing.assert_allclose(float(total), ref_total, **TOL)
    np.testing.assert_allclose(
        float(total),
        float(metrics["policy_loss"]) + 0.7 * float(metrics["value_loss"]) - 0.05 * float(metrics["entropy"]),
        **TOL,
    )
    np.testing.assert_allclose(float(metrics["clip_fraction"]), np.mean(np.abs(ref["ratio"] - 1) > 0.2), atol=1e-6)


def test_ppo_value_clipping_changes_the_value_loss():
    params = make_params()
    batch = make_batch(params)
    _, unclipped = ppo.loss(params, batch, RNG, policy=POLICY, config=PPOConfig(vf_clip=0.0))
    _, clipped = ppo.loss(params, batch, RNG, policy=POLICY, config=PPOConfig(vf_clip=0.3))
    # max(unclipped, clipped error) can only grow the loss; with these values it grows strictly.
    assert float(clipped["value_loss"]) > float(unclipped["value_loss"]) + 1e-3


def test_ppo_ratio_one_gives_minus_mean_advantage():
    params = make_params()
    batch = make_batch(params, logp_noise=0.0)  # behaviour = current policy, so ratio == 1
    _, metrics = ppo.loss(params, batch, RNG, policy=POLICY, config=PPOConfig())
    np.testing.assert_allclose(float(metrics["policy_loss"]), -batch["advantages"].mean(), atol=1e-6)
    assert abs(float(metrics["approx_kl"])) < 1e-6
    assert float(metrics["clip_fraction"]) == 0.0


def test_ppo_policy_gradient_vanishes_where_the_clip_is_active():
    params = make_params()
    batch = make_batch(params, logp_noise=0.0)
    batch["logp"] = batch["logp"] - 1.0  # ratio = e > 1 + eps for every sample
    cfg = PPOConfig(clip_eps=0.2, vf_coef=0.0, ent_coef=0.0)
    grad = jax.grad(lambda p, b: ppo.loss(p, b, RNG, policy=POLICY, config=cfg)[0])

    # Positive advantages: min picks the clipped, constant surrogate -> no policy gradient.
    pos = dict(batch, advantages=np.abs(batch["advantages"]) + 0.1)
    g = grad(params, pos)
    assert np.abs(np.asarray(g["W"])).max() == 0.0 and np.abs(np.asarray(g["b"])).max() == 0.0

    # Negative advantages: min picks ratio * adv, which still pushes the probability down.
    neg = dict(batch, advantages=-np.abs(batch["advantages"]) - 0.1)
    g = grad(params, neg)
    assert np.abs(np.asarray(g["W"])).max() > 1e-3


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a2c_loss_matches_numpy(jit):
    config = A2CConfig(vf_coef=0.25, ent_coef=0.1)
    params = make_params(seed=2)
    batch = make_batch(params, seed=3)
    total, metrics = _loss_fn(a2c, config, jit)(params, batch, RNG)
    ref_total, ref = np_a2c_loss(params, batch, 0.25, 0.1)
    for k in ("policy_loss", "value_loss", "entropy"):
        np.testing.assert_allclose(float(metrics[k]), ref[k], **TOL)
    np.testing.assert_allclose(float(total), ref_total, **TOL)
    np.testing.assert_allclose(
        float(total),
        float(metrics["policy_loss"]) + 0.25 * float(metrics["value_loss"]) - 0.1 * float(metrics["entropy"]),
        **TOL,
    )


def _numeric_grad(f, params, key, idx, h=1e-3):
    up = {k: np.array(v, np.float64) for k, v in params.items()}
    dn = {k: np.array(v, np.float64) for k, v in params.items()}
    up[key][idx] += h
    dn[key][idx] -= h
    return (f(up) - f(dn)) / (2 * h)


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_gradients_are_finite_and_match_finite_differences(algo):
    params = make_params(seed=4)
    batch = make_batch(params, seed=5)
    if algo == "ppo":
        config = PPOConfig(vf_clip=0.3, vf_coef=0.5, ent_coef=0.01)
        loss, ref = ppo.loss, lambda p: np_ppo_loss(p, batch, 0.2, 0.3, 0.5, 0.01)[0]
    else:
        config = A2CConfig(vf_coef=0.5, ent_coef=0.01)
        loss, ref = a2c.loss, lambda p: np_a2c_loss(p, batch, 0.5, 0.01)[0]
    grads = jax.jit(jax.grad(lambda p: loss(p, batch, RNG, policy=POLICY, config=config)[0]))(params)
    for k, g in grads.items():
        assert g.shape == params[k].shape
        assert np.isfinite(np.asarray(g)).all(), k
    # The numpy loss is piecewise smooth, so central differences check the gradient's value too.
    for key, idx in [("W", (0, 1)), ("b", (2,)), ("wv", (1,))]:
        np.testing.assert_allclose(float(grads[key][idx]), _numeric_grad(ref, params, key, idx), rtol=1e-2, atol=1e-3)


def test_a2c_advantages_carry_no_gradient():
    params = make_params()
    batch = make_batch(params)
    cfg = A2CConfig(vf_coef=0.0, ent_coef=0.0)
    g_adv = jax.grad(lambda adv: a2c.loss(params, dict(batch, advantages=adv), RNG, policy=POLICY, config=cfg)[0])(
        jnp.asarray(batch["advantages"])
    )
    assert np.abs(np.asarray(g_adv)).max() == 0.0
