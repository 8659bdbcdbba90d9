"""Each algorithm reaches a stated return on CartPole-v1 within a stated env-step budget.

Fixed seeds, 2 Ray rollout workers, the algorithms' default configs. The
thresholds are the issue's; the budgets are upper bounds, not typical runs.
"""

from __future__ import annotations

import pytest

from jaxflow import Algorithm
from jaxflow.api.loop import train

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


def test_dqn_reaches_450_within_200k_steps(ray_local):
    algo = Algorithm.build("DQN", env="CartPole-v1", seed=0)
    try:
        result = train(algo, {"episode_return_mean": 450.0, "env_steps_sampled": 200_000}, verbose=False)
    finally:
        algo.stop()
    assert result["episode_return_mean"] >= 450.0, result
    assert result["env_steps_sampled"] <= 200_000 + 2048
    # The replay ratio is the configured one: 8 replayed transitions per sampled one, in
    # whole rounds, counted from learning_starts on.
    assert result["env_steps_trained"] == pytest.approx(8 * (result["env_steps_sampled"] - 1_000), rel=0.05)


def test_apex_greedy_policy_reaches_400_within_500k_steps(ray_local):
    """Ape-X's training returns mix its actors' exploration rates (0.4 and 0.4^8 with
    two actors), so the learned policy is judged greedily, as in the paper's evaluation:
    evaluation during training (10 greedy episodes every 4 iterations of 5k env steps, in an
    actor of its own) and a stop on its return. A rate limiter fixes the replay ratio at 4,
    so the result does not hang on how fast the learner thread runs next to the actors on
    this machine. The run is asynchronous, so its step count varies: 41k-200k in most runs
    here, but one fresh-clone CI run had only reached 261 by 300k, hence a 500k budget."""
    algo = Algorithm.build(
        "APEX",
        env="CartPole-v1",
        num_workers=2,
        num_replay_shards=2,
        samples_per_insert=4.0,
        seed=0,
        evaluation_interval=4,
        evaluation_episodes=10,
    )
    try:
        result = train(algo, {"evaluation/episode_return_mean": 400.0, "env_steps_sampled": 500_000}, verbose=False)
        stats = algo.replay.stats()
    finally:
        algo.stop()
    evaluation = result.get("evaluation", {})
    assert evaluation.get("episode_return_mean", 0.0) >= 400.0, result
    assert evaluation["episodes"] == 10 and evaluation["training_iteration"] <= result["training_iteration"]
    assert evaluation["env_steps_sampled"] <= result["env_steps_sampled"]  # its policy is that of an earlier iteration
    assert (
        result["episode_return_mean"] < evaluation["episode_return_mean"]
    )  # the actors explore; the greedy policy does not
    assert result["num_healthy_workers"] == 2 and len(stats) == 2
    assert all(s["size"] > 0 for s in stats)
    assert result["num_weight_syncs"] > 0 and result["learner"]["mean_abs_td_error"] > 0


@pytest.mark.parametrize("name", ["IMPALA", "APPO"])
def test_impala_family_reaches_450_within_1m_steps(ray_local, name):
    algo = Algorithm.build(name, env="CartPole-v1", num_workers=2, seed=0)
    try:
        result = train(algo, {"episode_return_mean": 450.0, "env_steps_sampled": 1_000_000}, verbose=False)
    finally:
        algo.stop()
    assert result["episode_return_mean"] >= 450.0, result
    # The learner trains what the actors sampled, less what is still on its way: a partial
    # train batch, 4 batches in the in-queue, 1 in the update and 4 in the out-queue.
    assert 0 <= result["env_steps_sampled"] - result["env_steps_trained"] <= 10 * 512
    assert result["learner"]["policy_lag"] >= 0 and result["num_weight_syncs"] > 0
    feed = result["to_device"]  # train batches went to the device through ToDevice
    assert feed["transfers"] == feed["batches"] >= result["num_updates"] and feed["bytes"] > 0
    assert result["queues"]["learner_updates"] >= result["num_updates"]


def test_ppo_in_device_mode_reaches_450_within_500k_steps():
    """Rollout and update compiled together on gymnax's CartPole-v1 (the same PPO loss and
    defaults as the Ray runs above; no Ray)."""
    algo = Algorithm.build("PPO", env="gymnax/CartPole-v1", seed=0)
    assert algo.mode == "device"
    result = train(algo, {"episode_return_mean": 450.0, "env_steps_sampled": 500_000}, verbose=False)
    assert result["episode_return_mean"] >= 450.0, result
    assert (
        result["env_steps_sampled"]
        <= 500_000 + algo.program.steps_per_iteration * algo.config.device.iterations_per_call
    )
    assert result["env_steps_trained"] == result["env_steps_sampled"]
