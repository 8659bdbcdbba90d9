"""Device mode learns a Brax environment: PPO on brax/inverted_pendulum (spring pipeline)."""

from __future__ import annotations

import pytest

from jaxflow import Algorithm
from jaxflow.api.loop import train

pytestmark = pytest.mark.learning

NUM_ENVS, FRAGMENT = 64, 32
BUDGET = 100_000  # env steps; compiling the program costs far more time than training it on a CPU
MARGIN = 150.0  # seeds 0, 1, 2 improved by about 450, 370 and 270 (from about 17-20)


def test_ppo_in_device_mode_improves_inverted_pendulum_by_150_within_100k_steps():
    """PPO's defaults on 64 environments. The untrained policy's return is the mean over the
    episodes that ended in the first iteration's rollout, which precedes the first update;
    the trained one the mean of the last 20 episodes after 100k env steps. One iteration
    per compiled call, so that the first result holds the untrained policy's episodes only."""
    algo = Algorithm.build(
        "PPO",
        env="brax/inverted_pendulum",
        seed=0,
        metrics_num_episodes=20,
        **{"device.num_envs": NUM_ENVS, "rollout.rollout_fragment_length": FRAGMENT, "device.iterations_per_call": 1},
    )
    assert algo.mode == "device" and algo.program.env.backend == "spring"
    try:
        untrained = algo.train()
        result = train(algo, {"env_steps_sampled": BUDGET}, verbose=False)
    finally:
        algo.stop()
    assert untrained["training_iteration"] == 1 and untrained["episodes"] >= NUM_ENVS  # about one episode per env
    baseline, trained = untrained["episode_return_mean"], result["episode_return_mean"]
    assert trained - baseline >= MARGIN, (baseline, trained)
    assert result["env_steps_sampled"] <= BUDGET + NUM_ENVS * FRAGMENT
