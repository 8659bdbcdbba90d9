"""Continuous control learns: PPO's Gaussian policy on Pendulum within the issue's budget."""

from __future__ import annotations

import numpy as np
import pytest

from jaxflow import Algorithm
from jaxflow.api.loop import train

pytestmark = pytest.mark.learning

PENDULUM_PPO = {
    "gamma": 0.9,  # Pendulum's reward is dense: a short horizon learns the swing-up faster
    "device.num_envs": 32,
    "device.num_seeds": 3,
    "rollout.rollout_fragment_length": 64,
    "minibatch_size": 512,
}


def test_ppo_in_device_mode_reaches_minus_300_on_pendulum_within_300k_steps():
    """Three seeds as one vmapped run on gymnax's Pendulum-v1: their mean return (over each
    member's last 100 episodes) reaches -300 within 300k env steps per member."""
    algo = Algorithm.build("PPO", env="gymnax/Pendulum-v1", seed=0, **PENDULUM_PPO)
    assert algo.mode == "device"
    try:
        result = train(algo, {"env_steps_sampled": 300_000}, verbose=False)
    finally:
        algo.stop()
    per_seed = [m["episode_return_mean"] for m in result["members"].values()]
    assert len(per_seed) == 3 and np.mean(per_seed) >= -300.0, per_seed
    assert result["env_steps_sampled"] <= 300_000 + 32 * 64 * algo.config.device.iterations_per_call
