"""Running observation normalization and reward scaling: the merged statistics against numpy
on all samples at once, the host and device arithmetic alike, and a worker's delta merged on
the driver."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow.algorithms.ppo import PPOConfig
from jaxflow.config import ConfigError, make_config
from jaxflow.rollout.normalize import (
    VARIANCE_EPS,
    HostNormalizer,
    discounted_returns,
    moments_init,
    moments_merge,
    moments_of,
    moments_std,
    normalize_observations,
    normalizer_merge,
)


def test_merged_moments_equal_numpys_over_all_samples_in_any_split():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(1000, 4)) * np.array([1.0, 10.0, 0.1, 0.0])
    for cuts in ([500], [1, 999], [10, 400, 401, 990]):
        m = moments_init((4,))
        for part in np.split(x, cuts):
            m = moments_merge(m, moments_of(part))
        np.testing.assert_allclose(m.mean, x.mean(0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(m.m2 / m.count, x.var(0), rtol=1e-10, atol=1e-12)
        assert float(m.count) == 1000
    # The constant feature is centred, not divided by zero; the others have mean 0 and std 1.
    z = normalize_observations(m, x, clip=1e9)
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-9)
    np.testing.assert_allclose(z.std(0), [1.0, 1.0, 1.0, 0.0], atol=1e-6)


def test_the_device_arithmetic_is_the_hosts_in_float32():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(64, 3)), rng.normal(5.0, 3.0, size=(32, 3))
    host = moments_merge(moments_merge(moments_init((3,)), moments_of(a)), moments_of(b))
    dev = moments_merge(
        moments_merge(moments_init((3,), jnp), moments_of(jnp.asarray(a, jnp.float32))),
        moments_of(jnp.asarray(b, jnp.float32)),
    )
    np.testing.assert_allclose(np.asarray(dev.mean), host.mean, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(moments_std(dev)), moments_std(host), rtol=1e-5)


def test_before_any_sample_the_std_is_one_and_clipping_holds():
    m = moments_init((2,))
    np.testing.assert_allclose(moments_std(m), np.sqrt(1 + VARIANCE_EPS))
    obs = np.array([[50.0, -50.0]], np.float32)
    out = normalize_observations(m, obs, clip=5.0)
    assert out.dtype == np.float32 and out.tolist() == [[5.0, -5.0]]


def test_discounted_returns_restart_where_an_episode_ended():
    ret, carry = discounted_returns(np.array([1.0, 2.0]), np.array([1.0, 1.0]), np.array([0.0, 1.0]), 0.5)
    assert ret.tolist() == [1.5, 2.0] and carry.tolist() == [1.5, 0.0]


def test_a_workers_delta_merges_on_the_driver_into_the_statistics_of_every_sample():
    config = make_config(PPOConfig, normalize_observations=True, scale_rewards=True, gamma=0.9)
    rng = np.random.default_rng(2)
    workers = [HostNormalizer(config, (2,), num_envs=3) for _ in range(2)]
    seen = []
    for t in range(5):
        for w in workers:
            obs = rng.normal(t, 1.0, size=(3, 2)).astype(np.float32)
            seen.append(obs)
            w.observe(obs)
            w.rewards(slice(0, 3), np.ones(3), np.zeros(3))
    run = normalizer_merge(*(w.pop_delta() for w in workers))
    np.testing.assert_allclose(run.obs.mean, np.concatenate(seen).astype(np.float64).mean(0), rtol=1e-12)
    # Each env's discounted return after t + 1 steps of reward 1: sum of 0.9^k, k <= t.
    returns = np.repeat([sum(0.9**k for k in range(t + 1)) for t in range(5)], 6)
    np.testing.assert_allclose(run.ret.mean, returns.mean(), rtol=1e-12)
    np.testing.assert_allclose(run.ret.m2 / run.ret.count, returns.var(), rtol=1e-10)
    # After the sync a worker normalizes with the run's statistics (nothing seen since).
    workers[0].set_stats(run)
    assert workers[0].pop_delta().obs.count == 0
    obs = np.array([[1.0, 2.0]], np.float32)
    np.testing.assert_allclose(workers[0].normalize(obs), (obs - run.obs.mean) / moments_std(run.obs), rtol=1e-6)
    # A scaled reward is the reward over the std of the discounted returns.
    np.testing.assert_allclose(
        workers[1].rewards(slice(0, 1), np.array([2.0]), np.array([1.0])),
        [2.0 / moments_std(workers[1].stats.ret)],
        rtol=1e-6,
    )


def test_the_clip_must_be_positive():
    with pytest.raises(ConfigError, match="normalize_clip must satisfy 0 < value"):
        make_config(PPOConfig, normalize_clip=0.0)
