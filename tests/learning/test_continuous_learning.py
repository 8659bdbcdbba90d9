"""Continuous control learns within the issue's budgets: PPO's Gaussian policy, SAC and TD3 on
Pendulum; two PPO agents on the multi-agent Rendezvous game."""

from __future__ import annotations

import numpy as np
import pytest
import tuned_examples as tuned

from jaxflow import Algorithm
from jaxflow.algorithms.multiagent import MultiAgentConfig
from jaxflow.api.loop import train
from jaxflow.config import make_config

pytestmark = pytest.mark.learning


def test_ppo_in_device_mode_reaches_minus_300_on_pendulum_within_300k_steps():
    """Three seeds as one vmapped run on gymnax's Pendulum-v1: their mean return (over each
    member's last 100 episodes) reaches -300 within 300k env steps per member."""
    result, algo, _stop = tuned.run("ppo-gymnax-pendulum")
    assert algo.mode == "device"
    per_seed = [m["episode_return_mean"] for m in result["members"].values()]
    assert len(per_seed) == 3 and np.mean(per_seed) >= -300.0, per_seed
    assert result["env_steps_sampled"] <= 300_000 + 32 * 64 * algo.config.device.iterations_per_call


def test_sac_reaches_minus_200_on_pendulum_within_20k_steps(ray_local):
    """One rollout worker, one SGD step of 256 per env step on the replay shard."""
    algo, stop = tuned.build("sac-pendulum")
    try:
        result = train(algo, stop, verbose=False)
        greedy = algo.evaluate(episodes=10, seed=1)
    finally:
        algo.stop()
    tuned.assert_reaches("sac-pendulum", result)
    assert result["env_steps_sampled"] <= 20_000 + algo.config.min_env_steps_per_iteration
    # The squashed mean plays as well as the noisy policy that reached -200, on most starts: the
    # run stops the moment the noisy mean crosses -200, when a start or two may still fail to
    # swing up (one -1,322 among five was seen), so the median, with slack for 10 episodes.
    assert np.median(greedy["returns"]) >= -300.0, greedy


def test_td3_reaches_minus_200_on_pendulum_within_30k_steps(ray_local):
    """The paper's settings (lr 1e-3, exploration noise 0.1, smoothing 0.2/0.5, actor every
    2 steps) with 128-unit layers and 1,000 uniformly random steps first."""
    result, algo, _stop = tuned.run("td3-pendulum")
    assert result["env_steps_sampled"] <= 30_000 + algo.config.min_env_steps_per_iteration


RENDEZVOUS_PPO = {
    "algorithm": "PPO",
    "config": {"lr": 3e-3, "hidden_sizes": (32, 32), "train_batch_size": 512, "minibatch_size": 128},
}


def test_two_ppo_agents_learn_to_meet_on_the_rendezvous_game_within_8k_steps(ray_local):
    """Two PPO policies, one per agent, sampled in the driver (16 envs x 32 steps a round, an
    update per round): within 16 iterations of 512 env steps (8,192) the greedy team return
    (both agents' returns summed, 50 episodes of the same evaluation seed) rises by at least
    10 over the untrained policies' (which barely move: about -2 * 20/3 = -13.3) and passes
    -3 (the optimum is -2 * 3/8 = -0.75)."""
    config = make_config(
        MultiAgentConfig,
        env="multiagent/Rendezvous-v0",
        policies={"first": RENDEZVOUS_PPO, "second": RENDEZVOUS_PPO},
        mapping={"agent_0": "first", "agent_1": "second"},
        num_workers=0,
        num_envs_per_worker=16,
        rollout_fragment_length=32,
        min_env_steps_per_iteration=512,
        seed=0,
    )
    algo = Algorithm(config)
    try:
        untrained = algo.evaluate(episodes=50, seed=1)["return_mean"]
        result = train(algo, {"training_iteration": 16}, verbose=False)
        trained = algo.evaluate(episodes=50, seed=1)["return_mean"]
    finally:
        algo.stop()
    assert result["env_steps_sampled"] == 16 * 512
    assert trained >= untrained + 10.0 and trained >= -3.0, (untrained, trained)
