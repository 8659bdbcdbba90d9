"""Rainbow's parts: C51's projection and loss, QR-DQN's quantile Huber loss, noisy layers and
the config checks, against hand-checked numbers and independent numpy implementations."""

import importlib
import pathlib
import re

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow import ConfigError, envs
from jaxflow.algorithms.dqn import DQN, DQNConfig, loss
from jaxflow.algorithms.dqn.distributional import (
    categorical_losses,
    categorical_target,
    quantile_losses,
    quantile_midpoints,
)
from jaxflow.algorithms.rainbow import RAINBOW, RainbowConfig
from jaxflow.networks import NoisyDense, factorised_noise
from jaxflow.ondevice.rollout import EnvCarry, rollout
from jaxflow.policies import categorical_q_outputs, categorical_support, q_policy, quantile_q_outputs
from jaxflow.policies.policy import compiled_forward


def numpy_projection(r, d, probs, atoms):
    """C51's Algorithm 1 (Bellemare et al., 2017), one transition at a time; an atom that lands
    exactly on the support keeps its whole mass (the paper's l == u case)."""
    v_min, v_max, dz = atoms[0], atoms[-1], atoms[1] - atoms[0]
    out = np.zeros((len(r), len(atoms)))
    for n in range(len(r)):
        for j, z in enumerate(atoms):
            b = (np.clip(r[n] + d[n] * z, v_min, v_max) - v_min) / dz
            lo, hi = int(np.floor(b)), int(np.ceil(b))
            if lo == hi:
                out[n, lo] += probs[n, j]
            else:
                out[n, lo] += probs[n, j] * (hi - b)
                out[n, hi] += probs[n, j] * (b - lo)
    return out


def test_c51_projection_hand_checked():
    atoms = categorical_support(0.0, 2.0, 3)  # z = [0, 1, 2]
    probs = jnp.array([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5]])
    # Row 0: r = 0.5, discount 0.5 moves the atoms to [0.5, 1.0, 1.5]: 0.5 splits 0.2 evenly
    # between z0 and z1, 1.0 lands on z1, 1.5 splits 0.5 evenly between z1 and z2:
    # [0.1, 0.1 + 0.3 + 0.25, 0.25] = [0.1, 0.65, 0.25].
    # Row 1: r = 2, discount 0.9 moves them to [2, 2.9, 3.8], all clipped to v_max: [0, 0, 1].
    target = categorical_target(jnp.array([0.5, 2.0]), jnp.array([0.5, 0.9]), probs, atoms)
    np.testing.assert_allclose(np.asarray(target), [[0.1, 0.65, 0.25], [0.0, 0.0, 1.0]], atol=1e-6)


def test_c51_projection_and_loss_match_algorithm_1():
    rng = np.random.default_rng(0)
    B, A, N = 32, 3, 11
    atoms = np.asarray(categorical_support(-5.0, 5.0, N))
    r = rng.normal(scale=3.0, size=B).astype(np.float32)
    d = rng.choice([0.0, 0.9, 0.99], size=B).astype(np.float32)
    probs = rng.dirichlet(np.ones(N), size=B).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(categorical_target(r, d, probs, atoms)), numpy_projection(r, d, probs, atoms), atol=1e-5
    )
    # The loss is the cross-entropy of the online distribution at the taken action against the
    # projection of the target network's distribution at the selector's greedy action.
    logits_tm1, logits_t = (rng.normal(size=(B, A, N)).astype(np.float32) for _ in range(2))
    selector = rng.normal(size=(B, A)).astype(np.float32)
    a = rng.integers(A, size=B).astype(np.int32)
    losses = categorical_losses(logits_tm1, a, r, d, logits_t, selector, atoms)
    rows = np.arange(B)
    p_t = np.asarray(jax.nn.softmax(logits_t[rows, selector.argmax(1)]))
    log_p = np.asarray(jax.nn.log_softmax(logits_tm1[rows, a]))
    expected = -(numpy_projection(r, d, p_t, atoms) * log_p).sum(-1)
    np.testing.assert_allclose(np.asarray(losses), expected, rtol=1e-4, atol=1e-5)


def numpy_quantile_huber(q_tm1, a, r, d, q_t, selector, legal, kappa):
    """Dabney et al. (2018), Eq. 10: sum over online quantiles i of the mean over target
    quantiles j of |tau_i - 1{u_ij < 0}| L_kappa(u_ij), u_ij = T theta_j - theta_i."""
    B, _, N = q_tm1.shape
    tau = (np.arange(N) + 0.5) / N
    out = np.zeros(B)
    for b in range(B):
        a_t = np.where(legal[b], selector[b].mean(-1), -np.inf).argmax()
        target = r[b] + d[b] * q_t[b, a_t]
        u = target[None, :] - q_tm1[b, a[b]][:, None]
        huber = np.where(np.abs(u) <= kappa, 0.5 * u**2, kappa * (np.abs(u) - 0.5 * kappa))
        out[b] = (np.abs(tau[:, None] - (u < 0)) * huber).mean(axis=1).sum()
    return out


def test_quantile_huber_loss_matches_numpy_and_skips_illegal_actions():
    rng = np.random.default_rng(1)
    B, A, N = 16, 3, 8
    q_tm1, q_t = (rng.normal(size=(B, A, N)).astype(np.float32) for _ in range(2))
    selector = rng.normal(size=(B, A, N)).astype(np.float32)
    selector[:, 2] += 10.0  # action 2 would be chosen, but it is illegal where the mask says so
    legal = np.ones((B, A), bool)
    legal[: B // 2, 2] = False
    a = rng.integers(A, size=B).astype(np.int32)
    r = rng.normal(size=B).astype(np.float32)
    d = rng.choice([0.0, 0.99], size=B).astype(np.float32)
    for kappa in (1.0, 0.5):
        got = quantile_losses(q_tm1, a, r, d, q_t, selector, legal, kappa)
        ref = numpy_quantile_huber(q_tm1, a, r, d, q_t, selector, legal, kappa)
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(quantile_midpoints(4)), [0.125, 0.375, 0.625, 0.875])


def test_distributional_heads_read_as_masked_mean_q():
    # C51 on z = [0, 10]: probabilities [0.5, 0.5] mean 5, [0.9, 0.1] mean 1; QR: means of quantiles.
    logits = jnp.log(jnp.array([[[0.5, 0.5], [0.9, 0.1], [0.1, 0.9]]]))
    q, v = categorical_q_outputs(logits, None, v_min=0.0, v_max=10.0)
    np.testing.assert_allclose(np.asarray(q), [[5.0, 1.0, 9.0]], rtol=1e-5)
    q, v = categorical_q_outputs(logits, jnp.array([[True, True, False]]), v_min=0.0, v_max=10.0)
    assert float(v[0]) == pytest.approx(5.0) and int(q.argmax()) == 0  # the illegal 9 is never the max
    q, v = quantile_q_outputs(jnp.array([[[1.0, 3.0], [0.0, 8.0]]]), jnp.array([[True, False]]))
    assert float(q[0, 0]) == 2.0 and float(v[0]) == 2.0 and int(q.argmax()) == 0


def test_noisy_layer_noise_changes_per_key_and_is_absent_without_one():
    layer = NoisyDense(3)
    x = jnp.ones((2, 4))
    params = layer.init(jax.random.PRNGKey(0), x)
    p = params["params"]
    mean = layer.apply(params, x)
    np.testing.assert_allclose(np.asarray(mean), np.asarray(x @ p["mu_w"] + p["mu_b"]), rtol=1e-6)
    y1, y1_again, y2 = (layer.apply(params, x, rngs={"noise": jax.random.PRNGKey(k)}) for k in (1, 1, 2))
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(y1_again))
    assert float(jnp.abs(y1 - y2).min()) > 0 and float(jnp.abs(y1 - mean).min()) > 0
    np.testing.assert_array_equal(np.asarray(y1[0]), np.asarray(y1[1]))  # one draw per call, shared by the batch
    # sigma starts at sigma_0 / sqrt(fan_in) = 0.5 / 2; mu within +-1 / sqrt(fan_in).
    np.testing.assert_allclose(np.asarray(p["sigma_w"]), 0.25)
    assert float(jnp.abs(p["mu_w"]).max()) <= 0.5


def test_factorised_noise_is_the_outer_product_of_signed_square_roots():
    key = jax.random.PRNGKey(3)
    eps_w, eps_b = factorised_noise(key, 5, 3)
    k_in, k_out = jax.random.split(key)
    e_in, e_out = np.asarray(jax.random.normal(k_in, (5,))), np.asarray(jax.random.normal(k_out, (3,)))

    def f(x):
        return np.sign(x) * np.sqrt(np.abs(x))

    np.testing.assert_allclose(np.asarray(eps_w), np.outer(f(e_in), f(e_out)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(eps_b), f(e_out), rtol=1e-6)
    # Through the layer: with inputs [I; 0] in one call, the weight noise read back from the
    # outputs is rank one, its output factor the bias noise.
    layer = NoisyDense(3)
    x = jnp.concatenate([jnp.eye(5), jnp.zeros((1, 5))])
    params = layer.init(jax.random.PRNGKey(0), x)
    p = params["params"]
    y = np.asarray(layer.apply(params, x, rngs={"noise": jax.random.PRNGKey(7)}))
    noise_b = (y[5] - p["mu_b"]) / p["sigma_b"]
    noise_w = (y[:5] - p["mu_b"] - p["sigma_b"] * noise_b - p["mu_w"]) / p["sigma_w"]
    factor_in = noise_w[:, 0] / noise_b[0]
    np.testing.assert_allclose(noise_w, np.outer(factor_in, noise_b), rtol=1e-4, atol=1e-5)
    # Each factor is f(Gaussian): E f(x)^2 = E|x| = sqrt(2 / pi) (0.798), here over 4000 draws
    # (standard error of the mean of |x| is 0.6 / sqrt(4000) = 0.01; 4 of them allowed).
    draws = jnp.concatenate([factorised_noise(jax.random.PRNGKey(k), 1, 20)[1] for k in range(200)])
    assert float(jnp.mean(draws**2)) == pytest.approx(np.sqrt(2 / np.pi), abs=0.04)


def noisy_policy(**overrides):
    cfg = RainbowConfig(env="CartPole-v1", hidden_sizes=(16,), **overrides)
    return cfg, q_policy(cfg, gymnasium.spaces.Box(-1, 1, (4,)), gymnasium.spaces.Discrete(2))


def test_noisy_policy_resamples_each_acting_step_and_plays_its_mean_weights_greedily():
    cfg, policy = noisy_policy()
    assert policy.noisy
    params = policy.init(jax.random.PRNGKey(0))
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    forward = compiled_forward(policy, seed=0)
    step1, step2 = np.asarray(forward(params, obs)), np.asarray(forward(params, obs))
    assert np.abs(step1 - step2).min() > 0  # a worker's two steps draw different noise
    q_mean, _ = policy.apply(params, obs)  # no key: the mean weights, every time
    np.testing.assert_array_equal(np.asarray(q_mean), np.asarray(policy.apply(params, obs)[0]))
    np.testing.assert_array_equal(np.asarray(policy.greedy(params, obs)), np.asarray(q_mean.argmax(-1)))
    mu_params = jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.zeros_like(x) if "sigma" in jax.tree_util.keystr(path) else x, params
    )
    noisy_without_sigma = policy.apply(mu_params, obs, jax.random.PRNGKey(5))[0]
    np.testing.assert_allclose(np.asarray(noisy_without_sigma), np.asarray(q_mean), rtol=1e-5, atol=1e-5)
    # C51's logits [B, A, 51] read as Q-values within the support.
    q_keyed = policy.apply(params, obs, jax.random.PRNGKey(1))[0]
    assert q_keyed.shape == (8, 2) and float(q_keyed.min()) >= cfg.v_min and float(q_keyed.max()) <= cfg.v_max


def test_noisy_c51_loss_draws_noise_from_its_rng_and_reports_priorities():
    cfg, policy = noisy_policy()
    params = policy.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(2)
    batch = dict(
        obs=rng.normal(size=(6, 4)).astype(np.float32),
        next_obs=rng.normal(size=(6, 4)).astype(np.float32),
        actions=rng.integers(2, size=6).astype(np.int32),
        rewards=np.ones(6, np.float32),
        discounts=np.full(6, 0.99, np.float32),
        weights=np.ones(6, np.float32),
    )
    (l1, m1), (l1b, _), (l2, _) = (
        loss(params, batch, jax.random.PRNGKey(k), params, policy=policy, config=cfg) for k in (0, 0, 1)
    )
    assert float(l1) == float(l1b) and float(l1) != float(l2)
    # Priorities are the per-sample cross-entropies (positive), whose weighted mean is the loss.
    assert m1["td_error"].shape == (6,) and float(m1["td_error"].min()) > 0
    assert float(l1) == pytest.approx(float(jnp.mean(m1["td_error"])), rel=1e-6)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(c51=True, qr=True), "c51 and qr are two heads"),
        (dict(c51=True, v_min=5.0, v_max=5.0), "v_min (5.0) must be below v_max (5.0)"),
        (dict(c51=True, num_atoms=1), "num_atoms must satisfy 2 <= value"),
        (dict(qr=True, num_quantiles=1), "num_quantiles must satisfy 2 <= value"),
        (dict(noisy=True, noisy_sigma0=0.0), "noisy_sigma0 must satisfy 0 < value"),
    ],
)
def test_config_refuses_bad_distributional_settings_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        DQNConfig(env="CartPole-v1", **overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_rainbow_is_dqns_spec_with_every_part_on():
    assert RAINBOW.name == "Rainbow" and RAINBOW.plan is DQN.plan and RAINBOW.loss is DQN.loss
    assert RAINBOW.policy is DQN.policy and RAINBOW.run == DQN.run and RAINBOW.workers == DQN.workers
    cfg = RainbowConfig(env="CartPole-v1")
    assert cfg.c51 and cfg.noisy and cfg.double_q and cfg.dueling and cfg.prioritized_replay and cfg.n_step == 3
    assert (cfg.num_atoms, cfg.v_min, cfg.v_max, cfg.prioritized_replay_alpha) == (51, 0.0, 100.0, 0.5)
    assert cfg.epsilon_initial == cfg.epsilon_final == 0.0 and not cfg.qr


def test_rainbow_is_declared_in_the_entry_point_group():
    pyproject = pathlib.Path(__file__).parents[2] / "pyproject.toml"
    (entry,) = re.findall(r'^Rainbow = "(.+)"$', pyproject.read_text(), re.MULTILINE)
    module, _, attr = entry.partition(":")
    assert getattr(importlib.import_module(module), attr) is RAINBOW


def test_device_rollout_draws_new_noise_on_every_step():
    """Device mode's rollout acts with the noise of each step's own key (``policy.noise_key``
    of the scan's per-step key), so the Q-values it records differ from the mean weights'
    and the noise differs from step to step."""
    env, env_params = envs.make("gymnax/CartPole-v1")
    cfg = RainbowConfig(env="gymnax/CartPole-v1", hidden_sizes=(16,))
    policy = q_policy(cfg, gymnasium.spaces.Box(-1, 1, (4,)), gymnasium.spaces.Discrete(2))
    params = policy.init(jax.random.PRNGKey(0))
    B, T, key = 3, 4, jax.random.PRNGKey(9)
    obs, state = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(1), B), env_params)
    carry = EnvCarry(state, obs, jnp.zeros(B), jnp.zeros(B, jnp.int32))
    _, traj, _ = rollout(env, env_params, policy, None, cfg, params, carry, key, jnp.float32(0), T)
    step_keys = jax.random.split(key, T)
    for t in range(T):
        expected = policy.apply(params, traj["obs"][t], policy.noise_key(step_keys[t]))[0]
        np.testing.assert_allclose(np.asarray(traj["dist_inputs"][t]), np.asarray(expected), rtol=1e-5, atol=1e-5)
    noise = np.asarray(traj["dist_inputs"]) - np.stack([np.asarray(policy.apply(params, o)[0]) for o in traj["obs"]])
    assert np.abs(noise).min() > 0 and np.abs(noise[1:] - noise[:-1]).min() > 0
