"""Each algorithm reaches a stated return on CartPole-v1 within a stated env-step budget.

Fixed seeds, 2 Ray rollout workers, the algorithms' default configs. The
thresholds are the issue's; the budgets are upper bounds, not typical runs.
"""

from __future__ import annotations

import pytest

from jaxflow import Algorithm
from jaxflow.run import train

pytestmark = pytest.mark.learning

CASES = [
    ("PPO", 450.0, 200_000),
    ("A2C", 400.0, 500_000),
    ("A3C", 300.0, 500_000),
]


@pytest.mark.parametrize("name, target, budget", CASES)
def test_reaches_target_within_budget(ray_local, name, target, budget):
    algo = Algorithm.build(name, env="CartPole-v1", num_workers=2, seed=0)
    try:
        result = train(algo, {"episode_return_mean": target, "env_steps_sampled": budget}, verbose=False)
    finally:
        algo.stop()
    assert result["episode_return_mean"] >= target, result
    assert result["env_steps_sampled"] <= budget + 4096  # the last iteration may overshoot by one batch
    assert result["env_steps_trained"] == result["env_steps_sampled"]


def test_ppo_samples_in_the_driver_with_zero_workers(ray_local):
    algo = Algorithm.build("PPO", num_workers=0, num_envs_per_worker=16, seed=0)
    try:
        result = train(algo, {"episode_return_mean": 200.0, "env_steps_sampled": 150_000}, verbose=False)
    finally:
        algo.stop()
    assert result["num_healthy_workers"] == 1
    assert result["episode_return_mean"] >= 200.0, result
