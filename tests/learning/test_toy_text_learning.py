"""Toy-text envs train end to end: PPO on FrozenLake's one-hot positions.

Measured on 2 CPU cores with the default PPO config and 2 workers: seeds 0, 1 and 2 each
reach a mean return of 0.9 after 8,192 env steps (8 iterations, about 10 s with start-up);
the budget allows six times that.
"""

from __future__ import annotations

import pytest

from jaxflow import Algorithm
from jaxflow.api.loop import train

pytestmark = pytest.mark.learning

TARGET = 0.9  # the goal's reward is 1 and every other step's 0: 90% of episodes reach the goal
BUDGET = 50_000
BATCH = 1024  # PPO's train_batch_size: the last iteration may overshoot by one batch
GREEDY_EPISODES = 10


def test_ppo_reaches_the_goal_of_non_slippery_frozen_lake(ray_local):
    algo = Algorithm.build("PPO", env="FrozenLake-v1", env_config={"is_slippery": False}, num_workers=2, seed=0)
    try:
        result = train(algo, {"episode_return_mean": TARGET, "env_steps_sampled": BUDGET}, verbose=False)
        greedy = algo.evaluate(episodes=GREEDY_EPISODES)
    finally:
        algo.stop()
    assert result["episode_return_mean"] >= TARGET, result
    assert result["env_steps_sampled"] <= BUDGET + BATCH
    # The map is deterministic: the greedy policy (played through the same flattening) always arrives.
    assert greedy["return_mean"] == 1.0, greedy
