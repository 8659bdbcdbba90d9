"""DD-PPO (two members, no central learner) learns CartPole to PPO's threshold within PPO's budget."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import ray

import jaxflow.algorithms.ddppo  # noqa: F401 - registers DDPPO where the entry point is not installed yet
from jaxflow import Algorithm
from jaxflow.api.loop import train

pytestmark = pytest.mark.learning


PPO_TARGET, PPO_BUDGET = 450.0, 200_000  # tests/learning/test_learning.py's PPO on CartPole


def test_ddppo_two_members_learn_cartpole_to_450_within_ppos_budget(ray_local):
    """PPO's defaults on two members of 16 envs each (a random policy returns about 22; seed 0
    reached 472 at 106k steps); the members, which never receive weights from the driver, end
    every update with the same parameters."""
    algo = Algorithm.build("DDPPO", num_workers=2, seed=0)
    try:
        result = train(algo, {"episode_return_mean": PPO_TARGET, "env_steps_sampled": PPO_BUDGET}, verbose=False)
        first, second = (ray.get(m.call.remote("get_weights")) for m in algo.program.members)
    finally:
        algo.stop()
    assert result["episode_return_mean"] >= PPO_TARGET, result
    assert result["env_steps_trained"] == result["env_steps_sampled"]
    for a, b in zip(jax.tree_util.tree_leaves(first), jax.tree_util.tree_leaves(second)):
        np.testing.assert_array_equal(a, b)
