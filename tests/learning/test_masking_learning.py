"""A masked game is learned with no illegal move ever taken: PPO and DQN on Ray workers play
``jaxflow/MaskedChoice-v0`` through ``test/StrictMasks-v0``, which raises in the worker on an
illegal move (so a run that does not fail took none), with every episode its full 10 rounds.

In each of the 10 rounds half of the 6 actions are illegal; the observation shows a prize on
a legal action (reward 1) and a bait on an illegal one. Uniform play among the legal actions
earns 10 / 3 = 3.3; a policy ignoring the mask loses (-10) within a few rounds. Measured on 2
CPU cores with 1 worker, seeds 0, 1 and 2: PPO passes a mean return of 8 after 11,264-12,288
env steps, DQN after 14,336 (20 s each with start-up at best, on 2 cores shared with other work); the budgets
allow three times that.
"""

from __future__ import annotations

import pytest

from jaxflow import Algorithm

pytestmark = pytest.mark.learning

ENV = "test/StrictMasks-v0"
ROUNDS = 10  # MaskedChoice's episode_length: an episode shorter than this ended by an illegal move
TARGET = 8.0  # prizes taken out of 10; uniform legal play takes 3.3
GREEDY_EPISODES = 10


def train_until(algo: Algorithm, budget: int) -> dict:
    """Trains until the target or the step budget, checking every iteration's episodes."""
    while True:
        result = algo.train()
        assert result["episode_len_mean"] == ROUNDS and result["episode_return_min"] >= 0, result
        if result["episode_return_mean"] >= TARGET or result["env_steps_sampled"] >= budget:
            return result


@pytest.mark.parametrize("algorithm, budget", [("PPO", 36_000), ("DQN", 42_000)])
def test_a_masked_game_is_learned_without_an_illegal_move(ray_local, algorithm, budget):
    # metrics_num_episodes above an iteration's episodes: every episode is in some iteration's window.
    algo = Algorithm.build(algorithm, env=ENV, num_workers=1, seed=0, metrics_num_episodes=1_000)
    try:
        result = train_until(algo, budget)
        greedy = algo.evaluate(episodes=GREEDY_EPISODES)
    finally:
        algo.stop()
    assert result["episode_return_mean"] >= TARGET, result
    assert greedy["lengths"] == [ROUNDS] * GREEDY_EPISODES, greedy
    assert greedy["return_mean"] >= TARGET, greedy
