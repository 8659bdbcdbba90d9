"""Observation normalization and reward scaling on real Ray workers: every observation the
workers saw is counted once in the run's statistics, the learner trains on normalized
observations and scaled rewards, and checkpoints, restore and evaluation carry the statistics."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxflow import Algorithm, RolloutWorker, WorkerSpec, envs, get_algorithm, make_config
from jaxflow.api import cli
from jaxflow.config import ConfigError
from jaxflow.rollout.normalize import VARIANCE_EPS, moments_std, normalize_observations

PPO = get_algorithm("PPO")

NUM_WORKERS, ENVS, T = 2, 2, 16
SETTINGS = dict(
    env="Pendulum-v1",
    num_workers=NUM_WORKERS,
    num_envs_per_worker=ENVS,
    rollout_fragment_length=T,
    train_batch_size=NUM_WORKERS * ENVS * T,
    minibatch_size=32,
    normalize_observations=True,
    scale_rewards=True,
    seed=3,
)


@pytest.fixture(scope="module")
def trained(ray_local, tmp_path_factory):
    """PPO after two iterations, saved; the run's statistics at that point."""
    algo = Algorithm.build("PPO", **SETTINGS)
    results = [algo.train() for _ in range(2)]
    stats = algo.program.workers.normalizer
    path = algo.save(str(tmp_path_factory.mktemp("norm")))
    evaluated = algo.evaluate(episodes=2, seed=5)
    algo.stop()
    return results, stats, path, evaluated


def test_every_observation_the_workers_saw_is_counted_once(trained):
    results, stats, _, _ = trained
    sampled = results[-1]["env_steps_sampled"]
    # Each env's first observation after reset, then one per step; rewards one per step.
    assert float(stats.obs.count) == sampled + NUM_WORKERS * ENVS
    assert float(stats.ret.count) == sampled
    # Pendulum's observations: cos, sin of the angle in [-1, 1], angular velocity in [-8, 8].
    assert stats.obs.mean.shape == (3,) and np.all(np.abs(stats.obs.mean[:2]) <= 1)
    assert 0 < moments_std(stats.obs)[2] < 8


def test_the_statistics_survive_a_restore_and_evaluation_uses_them(trained, ray_local):
    _, stats, path, evaluated = trained
    algo = Algorithm.restore(path, num_workers=0)
    restored = algo.program.workers.normalizer
    np.testing.assert_array_equal(restored.obs.mean, stats.obs.mean)
    np.testing.assert_array_equal(restored.ret.m2, stats.ret.m2)
    assert algo.evaluate(episodes=2, seed=5)["returns"] == evaluated["returns"]
    algo.stop()


def test_jaxflow_evaluate_normalizes_with_the_checkpoints_statistics(trained, capsys):
    _, _, path, evaluated = trained
    assert cli.main(["evaluate", "--checkpoint", path, "--episodes", "2", "--seed", "5"]) == 0
    assert f"mean {np.mean(evaluated['returns']):.2f}" in capsys.readouterr().out


def test_a_worker_scales_each_reward_by_the_std_of_the_discounted_returns_so_far():
    """Recomputed independently: Pendulum's reward from each stored observation and action,
    each env's discounted return, and numpy's std of all returns up to that step."""
    config = make_config(PPO.config_cls, **dict(SETTINGS, normalize_observations=False, gamma=0.9))
    env = envs.make_cpu("Pendulum-v1")
    policy = PPO.policy(config, env.observation_space, env.action_space)
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(policy.init(jax.random.PRNGKey(0)), 0)
    frags = [worker.sample().data for _ in range(2)]  # 32 steps: no episode ends (200 steps)
    worker.close()
    obs, actions, stored = (
        np.concatenate([f[k] for f in frags]).astype(np.float64) for k in ("obs", "actions", "rewards")
    )
    angle = np.arctan2(obs[..., 1], obs[..., 0])
    raw = -(angle**2 + 0.1 * obs[..., 2] ** 2 + 0.001 * (2 * np.clip(actions[..., 0], -1, 1)) ** 2)
    returns = np.zeros_like(raw)
    for t in range(len(raw)):
        returns[t] = raw[t] + (0.9 * returns[t - 1] if t else 0.0)
    std = np.array([np.sqrt(returns[: t + 1].var() + VARIANCE_EPS) for t in range(len(raw))])
    np.testing.assert_allclose(stored, np.clip(raw / std[:, None], -10, 10), rtol=1e-4, atol=1e-5)


def test_a_worker_normalizes_observations_with_the_statistics_including_them():
    config = make_config(PPO.config_cls, **dict(SETTINGS, scale_rewards=False))
    env = envs.make_cpu("Pendulum-v1")
    policy = PPO.policy(config, env.observation_space, env.action_space)
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(policy.init(jax.random.PRNGKey(0)), 0)
    data = worker.sample().data
    stats = worker.normalizer.stats
    worker.close()
    # The last observation was normalized with the statistics of every observation so far.
    assert float(stats.obs.count) == (T + 1) * ENVS
    raw_last = data["last_obs"] * moments_std(stats.obs) + stats.obs.mean
    np.testing.assert_allclose(
        normalize_observations(stats.obs, raw_last.astype(np.float32), 10.0), data["last_obs"], atol=1e-5
    )
    assert np.abs(data["obs"]).max() <= 10.0 and abs(float(data["obs"][-1].mean())) < 3


def test_maml_refuses_to_normalize():
    with pytest.raises(
        ConfigError, match="normalize_observations and scale_rewards work on Ray rollout workers, not in MAML"
    ):
        Algorithm.build("MAML", normalize_observations=True)


def test_device_mode_counts_every_observation_and_return_and_checkpoints_them(tmp_path):
    algo = Algorithm.build(
        "PPO",
        env="gymnax/Pendulum-v1",
        num_envs=8,
        rollout_fragment_length=16,
        minibatch_size=64,
        iterations_per_call=2,
        normalize_observations=True,
        scale_rewards=True,
    )
    result = algo.train()
    stats = algo.program.get_normalizer()
    steps = 2 * 8 * 16
    assert result["env_steps_sampled"] == steps
    assert float(stats.obs.count) == steps + 8 and float(stats.ret.count) == steps
    # Undone with the final statistics, the last observations are Pendulum's again: cos^2 + sin^2 = 1.
    carry = algo.program.state.envs
    raw = np.asarray(carry.obs[0])
    last = normalize_observations(stats.obs, raw, 10.0)
    np.testing.assert_allclose(last * moments_std(stats.obs) + stats.obs.mean, raw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose((raw[:, :2] ** 2).sum(-1), 1.0, atol=1e-5)
    path = algo.save(str(tmp_path))
    evaluated = algo.evaluate(episodes=1, seed=2)
    algo.stop()
    restored = Algorithm.restore(path)
    np.testing.assert_array_equal(restored.program.get_normalizer().obs.m2, stats.obs.m2)
    assert restored.evaluate(episodes=1, seed=2)["returns"] == evaluated["returns"]
    restored.stop()
