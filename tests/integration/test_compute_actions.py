"""``Algorithm.compute_actions``: the greedy actions of a run's current weights for a batch of
observations, as the env takes them, checked against the network's own outputs."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxflow import Algorithm
from jaxflow.rollout.normalize import VARIANCE_EPS

CLIP = 10.0  # normalize_clip's default


def test_ray_run_acts_greedily_on_normalized_observations(ray_local):
    """A Categorical policy's actions are the argmax of its logits, computed here from the
    learner's weights on the observations normalized with the workers' statistics."""
    algo = Algorithm.build(
        "PPO",
        env="CartPole-v1",
        num_workers=0,
        num_envs_per_worker=2,
        rollout_fragment_length=16,
        train_batch_size=64,
        minibatch_size=32,
        normalize_observations=True,
        seed=0,
    )
    try:
        algo.train()  # the statistics and weights move away from their initial values
        obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
        actions = algo.compute_actions(obs)
        stats = algo.workers.normalizer.obs
        assert stats.count > 0
        x = np.clip((obs - stats.mean) / np.sqrt(stats.m2 / stats.count + VARIANCE_EPS), -CLIP, CLIP)
        logits, _ = algo.policy.apply(algo.learner.get_weights(), x)
        np.testing.assert_array_equal(actions, np.argmax(np.asarray(logits), axis=-1))
        assert actions.shape == (16,) and set(np.unique(actions)) == {0, 1}  # both actions occur
        with pytest.raises(ValueError, match=r"observations \[B, \*\(4,\)\], got shape \(16, 3\)"):
            algo.compute_actions(obs[:, :3])
    finally:
        algo.stop()


def test_device_run_acts_in_the_box_bounds_for_each_member():
    """A Gaussian policy in device mode: the action is the mean, clipped to [-1, 1] and scaled
    to Pendulum's bounds [-2, 2]; each member acts with its own weights."""
    algo = Algorithm.build(
        "PPO", env="gymnax/Pendulum-v1", num_seeds=2, num_envs=4, rollout_fragment_length=8, minibatch_size=32, seed=0
    )
    obs = np.random.default_rng(1).normal(size=(8, 3)).astype(np.float32)
    per_member = []
    for member in (0, 1):
        actions = algo.compute_actions(obs, member=member)
        inputs, _ = algo.policy.apply(algo.program.get_weights(member), obs)
        mean = np.asarray(inputs)[:, :1]
        np.testing.assert_allclose(actions, 2.0 * np.clip(mean, -1.0, 1.0), rtol=1e-6, atol=1e-6)
        assert actions.shape == (8, 1) and np.all(np.abs(actions) <= 2.0)
        per_member.append(actions)
    assert not np.allclose(per_member[0], per_member[1])  # two seeds, two networks
    assert (
        jax.tree.leaves(algo.program.get_weights(0))[0].shape == jax.tree.leaves(algo.program.get_weights(1))[0].shape
    )
