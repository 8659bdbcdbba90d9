"""Each algorithm reaches a stated return on CartPole-v1 within a stated env-step budget.

Fixed seeds; each run is a tuned example (``examples/tuned/<algo>-cartpole.json``, read as
``jaxflow train --config FILE`` reads it), so the numbers stated in the files stay true. The
thresholds are the issue's; the budgets are upper bounds, not typical runs. PPO's and Ape-X's
examples (``ppo-cartpole``, ``apex-cartpole``) run once, spread over the nodes of a local
cluster, in tests/integration/test_multinode.py, which makes these checks of them too.
"""

from __future__ import annotations

import pytest
import tuned_examples as tuned

from jaxflow import Algorithm
from jaxflow.api.loop import train

pytestmark = pytest.mark.learning


@pytest.mark.parametrize("example", ["a2c-cartpole", "a3c-cartpole"])
def test_reaches_target_within_budget(ray_local, example):
    result, _algo, stop = tuned.run(example)
    assert result["env_steps_sampled"] <= stop["env_steps_sampled"] + 4096  # the last iteration may overshoot
    assert result["env_steps_trained"] == result["env_steps_sampled"]


def test_ppo_samples_in_the_driver_with_zero_workers(ray_local):
    algo = Algorithm.build("PPO", num_workers=0, num_envs_per_worker=16, seed=0)
    try:
        result = train(algo, {"episode_return_mean": 200.0, "env_steps_sampled": 150_000}, verbose=False)
    finally:
        algo.stop()
    assert result["num_healthy_workers"] == 1
    assert result["episode_return_mean"] >= 200.0, result


def test_dqn_greedy_policy_reaches_450_within_120k_steps(ray_local):
    """The tuned DQN is judged as the DQN paper judged it: 10 greedy episodes every iteration,
    in an actor of its own. Its training return (the last 100 episodes, epsilon-greedy) lags
    the greedy one by tens of thousands of env steps, and a late collapse delays it past 120k in
    about 1 run of 7, where the greedy policy scored 450 at 6k-62k in 40 of 40 runs."""
    result, _algo, stop = tuned.run("dqn-cartpole")
    assert result["env_steps_sampled"] <= stop["env_steps_sampled"] + 2048
    evaluation = result["evaluation"]
    assert evaluation["episodes"] == 10 and evaluation["env_steps_sampled"] <= result["env_steps_sampled"]
    assert result["episode_return_mean"] < evaluation["episode_return_mean"]  # epsilon and the window lag
    # The replay ratio is the configured one: 32 replayed transitions per sampled one, in
    # whole rounds, counted from learning_starts on.
    assert result["env_steps_trained"] == pytest.approx(32 * (result["env_steps_sampled"] - 1_000), rel=0.05)


@pytest.mark.parametrize("example", ["impala-cartpole", "appo-cartpole"])
def test_impala_family_reaches_450_within_1m_steps(ray_local, example):
    result, _algo, _stop = tuned.run(example)
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
    result, algo, _stop = tuned.run("ppo-gymnax-cartpole")
    assert algo.mode == "device"
    assert (
        result["env_steps_sampled"]
        <= 500_000 + algo.program.steps_per_iteration * algo.config.device.iterations_per_call
    )
    assert result["env_steps_trained"] == result["env_steps_sampled"]
