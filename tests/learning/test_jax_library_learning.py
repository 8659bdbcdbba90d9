"""A JAX library's environment (navix) learned in device mode, end to end."""

from __future__ import annotations

import pytest

from jaxflow import Algorithm
from jaxflow.api.loop import train


@pytest.mark.learning
def test_ppo_learns_navix_empty_5x5_in_device_mode():
    # The shortest way to the goal is 5 steps (return 1.0); with 20 steps allowed a random
    # policy reaches it in about 3% of episodes (measured: return 0.03, length 19.96). PPO's
    # defaults, 16 envs: return 1.0 and length 5.5 after 20k env steps (seed 0); about 25
    # CPU-seconds, nearly all compiling.
    algo = Algorithm.build(
        "PPO", env="navix/Navix-Empty-5x5-v0", env_config={"max_steps": 20}, num_envs=16, iterations_per_call=5, seed=0
    )
    try:
        assert algo.mode == "device"
        result = train(algo, {"episode_return_mean": 0.95, "env_steps_sampled": 40_000}, verbose=False)
        assert result["episode_return_mean"] >= 0.95 and result["episode_len_mean"] <= 8, result
        greedy = algo.evaluate(episodes=3)  # on the host, through the CPU wrapper
        assert greedy["return_mean"] == 1.0, greedy
    finally:
        algo.stop()
