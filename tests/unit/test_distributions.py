"""Action distributions for every action space: log-probs and entropies against scipy and
distrax on hand-picked values, the squashed Gaussian against a numerical change of
variables, and each host sampler against its JAX distribution with a statistical test."""

from __future__ import annotations

import distrax
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxflow.policies import (
    BoxBounds,
    Deterministic,
    Gaussian,
    MultiCategorical,
    SquashedGaussian,
    distribution_for,
)

BOUNDS = BoxBounds((-2.0, 0.0), (2.0, 1.0))
# Two rows of (mean_1, mean_2, log_std_1, log_std_2).
INPUTS = np.array([[0.3, -0.5, np.log(0.5), 0.0], [-1.2, 0.8, np.log(2.0), np.log(0.1)]], np.float32)
P_VALUE = 1e-3  # statistical tests reject a correct sampler once in a thousand runs


def test_gaussian_log_prob_and_entropy_against_scipy():
    dist = Gaussian(BOUNDS)
    actions = np.array([[0.0, 1.0], [0.5, 0.75]], np.float32)
    mean, std = INPUTS[:, :2], np.exp(INPUTS[:, 2:])
    expected = stats.norm.logpdf(actions, mean, std).sum(-1)
    np.testing.assert_allclose(dist.log_prob(jnp.asarray(INPUTS), jnp.asarray(actions)), expected, rtol=1e-5)
    np.testing.assert_allclose(dist.entropy(jnp.asarray(INPUTS)), stats.norm.entropy(mean, std).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(dist.mode(jnp.asarray(INPUTS)), mean)
    # Hand-checked: N(0; 0, 1) in one dimension is -log(2 pi) / 2 = -0.918939.
    one = Gaussian(BoxBounds((-1.0,), (1.0,)))
    assert float(one.log_prob(jnp.zeros((1, 2)), jnp.zeros((1, 1)))[0]) == pytest.approx(-0.918939, abs=1e-6)


def test_gaussian_host_sampler_follows_the_jax_distribution():
    dist, n = Gaussian(BOUNDS), 50_000
    row = np.repeat(INPUTS[1:], n, axis=0)
    host, host_logp = dist.sample_host(np.random.default_rng(0), row)
    device, _ = dist.sample(jax.random.PRNGKey(0), jnp.asarray(row))
    for d in range(2):  # Kolmogorov-Smirnov: host draws against the exact CDF, and against JAX's draws
        assert stats.kstest(host[:, d], stats.norm(INPUTS[1, d], np.exp(INPUTS[1, 2 + d])).cdf).pvalue > P_VALUE
        assert stats.ks_2samp(host[:, d], np.asarray(device)[:, d]).pvalue > P_VALUE
    np.testing.assert_allclose(host_logp, dist.log_prob(jnp.asarray(row), jnp.asarray(host)), rtol=1e-4, atol=1e-4)


def test_squashed_gaussian_log_prob_is_the_numerical_change_of_variables():
    dist = SquashedGaussian(BOUNDS)
    actions = np.array([[0.2, -0.9], [-0.6, 0.7]])
    mean, std = INPUTS[:, :2].astype(np.float64), np.exp(INPUTS[:, 2:].astype(np.float64))
    # p_A(a) = d/da P(tanh(U) <= a) = d/da Phi((atanh(a) - mean) / std), by central differences.
    h = 1e-5

    def cdf(a):
        return stats.norm.cdf((np.arctanh(a) - mean) / std)

    density = ((cdf(actions + h) - cdf(actions - h)) / (2 * h)).prod(-1)
    logp = dist.log_prob(jnp.asarray(INPUTS), jnp.asarray(actions, jnp.float32))
    np.testing.assert_allclose(np.exp(logp), density, rtol=1e-3)
    ref = dist.to_distrax(jnp.asarray(INPUTS)).log_prob(jnp.asarray(actions, jnp.float32))
    np.testing.assert_allclose(logp, ref, rtol=1e-4)


def test_squashed_gaussian_samples_are_reparameterized_and_agree_with_the_host():
    dist, n = SquashedGaussian(BOUNDS), 50_000
    row = jnp.asarray(np.repeat(INPUTS[:1], n, axis=0))
    a, logp = dist.sample(jax.random.PRNGKey(1), row)
    assert float(jnp.abs(a).max()) <= 1.0
    np.testing.assert_allclose(logp, dist.log_prob(row, a), rtol=1e-3, atol=1e-3)
    host, host_logp = dist.sample_host(np.random.default_rng(1), np.asarray(row))
    for d in range(2):
        assert stats.ks_2samp(host[:, d], np.asarray(a)[:, d]).pvalue > P_VALUE
    np.testing.assert_allclose(host_logp, dist.log_prob(row, jnp.asarray(host)), rtol=1e-3, atol=1e-3)
    # d E[tanh(mean + std * eps)] / d mean = E[1 - tanh(u)^2]: the gradient flows through the sample.
    grad = jax.grad(lambda x: dist.sample(jax.random.PRNGKey(2), x)[0][:, 0].mean())(row)
    u = np.arctanh(np.clip(np.asarray(a)[:, 0], -1 + 1e-6, 1 - 1e-6))
    assert float(grad[:, 0].sum()) == pytest.approx(float(np.mean(1 - np.tanh(u) ** 2)), rel=0.02)


def test_deterministic_actor_and_box_rescaling():
    dist = Deterministic(BOUNDS)
    inputs = np.array([[0.0, 100.0]], np.float32)
    np.testing.assert_allclose(dist.sample_host(np.random.default_rng(0), inputs)[0], [[0.0, 1.0]])
    np.testing.assert_allclose(dist.mode(jnp.asarray(inputs)), [[0.0, 1.0]])
    # [-1, 1] onto [low, high], clipped: -1 -> low, 0 -> the middle, 1 and beyond -> high.
    a = np.array([[-1.0, 0.0], [0.0, 5.0], [-3.0, 1.0]], np.float32)
    expected = [[-2.0, 0.5], [0.0, 1.0], [-2.0, 1.0]]
    np.testing.assert_allclose(BOUNDS.to_env(a), expected)
    np.testing.assert_allclose(jax.jit(BOUNDS.to_env)(jnp.asarray(a)), expected)


def test_multi_categorical_against_independent_distrax_categoricals():
    dist = MultiCategorical((2, 3))
    inputs = np.array([[0.5, -0.5, 1.0, 0.0, -2.0], [0.0, 0.0, 3.0, -1.0, 0.5]], np.float32)
    actions = np.array([[1, 0], [0, 2]], np.int32)
    parts = [distrax.Categorical(logits=inputs[:, :2]), distrax.Categorical(logits=inputs[:, 2:])]
    expected = parts[0].log_prob(actions[:, 0]) + parts[1].log_prob(actions[:, 1])
    np.testing.assert_allclose(dist.log_prob(jnp.asarray(inputs), jnp.asarray(actions)), expected, rtol=1e-5)
    np.testing.assert_allclose(dist.entropy(jnp.asarray(inputs)), parts[0].entropy() + parts[1].entropy(), rtol=1e-5)
    np.testing.assert_array_equal(dist.mode(jnp.asarray(inputs)), [[0, 0], [0, 0]])
    # The host's draws of the second component follow its softmax (chi-square).
    n = 60_000
    host, host_logp = dist.sample_host(np.random.default_rng(3), np.repeat(inputs[:1], n, axis=0))
    p = np.asarray(jax.nn.softmax(inputs[0, 2:]), np.float64)
    assert stats.chisquare(np.bincount(host[:, 1], minlength=3), n * p / p.sum()).pvalue > P_VALUE
    ref = dist.log_prob(jnp.asarray(np.repeat(inputs[:1], n, axis=0)), jnp.asarray(host))
    np.testing.assert_allclose(host_logp, ref, rtol=1e-5, atol=1e-5)


def test_distribution_for_each_space_and_the_spaces_it_refuses():
    box = gymnasium.spaces.Box(-2.0, 2.0, (3,))
    assert isinstance(distribution_for(box), Gaussian) and distribution_for(box).num_free_inputs == 3
    assert distribution_for(box, state_dependent_std=True).num_free_inputs == 0
    assert isinstance(distribution_for(box, "squashed"), SquashedGaussian)
    assert distribution_for(box, "deterministic").num_inputs == 3
    assert distribution_for(gymnasium.spaces.MultiDiscrete([2, 3])).num_inputs == 5
    with pytest.raises(TypeError, match="finite bounds"):
        distribution_for(gymnasium.spaces.Box(-np.inf, np.inf, (2,)))
    with pytest.raises(TypeError, match="1-D"):
        distribution_for(gymnasium.spaces.Box(-1.0, 1.0, (2, 2)))
    with pytest.raises(TypeError, match="supported: Discrete, MultiDiscrete, Box"):
        distribution_for(gymnasium.spaces.Text(5))
