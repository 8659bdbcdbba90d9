"""R2D2 learns CartPole with the velocities hidden within a stated env-step budget, in device
mode (no Ray) and in Ray mode (actors, a sequence shard, the learner thread): the tuned
examples ``examples/tuned/r2d2-stateless-cartpole.json`` and ``r2d2-stateless-cartpole-ray.json``."""

from __future__ import annotations

import pytest
import tuned_examples as tuned

import jaxflow.algorithms.r2d2  # noqa: F401  (registers R2D2 where the installed entry points predate it)
from jaxflow.api.loop import train

pytestmark = pytest.mark.learning


def test_r2d2_greedy_policy_reaches_400_on_stateless_cartpole_within_100k_steps():
    """The training returns mix the 16 envs' epsilons (0.4 down to 0.4^8), so the policy is
    judged greedily (10 episodes after each compiled call of 4,000 env steps, its LSTM state
    carried): 400 within 100k env steps; seeds 0, 1, 2 reach it at 36k, 40k and 40k here."""
    result, algo, stop = tuned.run("r2d2-stateless-cartpole")
    assert algo.mode == "device"
    assert result["env_steps_sampled"] <= stop["env_steps_sampled"] + 4_000
    assert result["episode_return_mean"] < result["evaluation"]["episode_return_mean"]  # the envs explore


def test_r2d2_in_ray_mode_greedy_policy_reaches_400_on_stateless_cartpole_within_120k_steps(ray_local):
    """Two actors (epsilons 0.4 and 0.4^4) on one sequence shard, judged greedily by the
    evaluator actor while training goes on (10 episodes, as Ape-X's test): 400 within 120k env
    steps. The run is asynchronous: seeds 0, 1, 2 stopped at 26k, 50k and 73k in one run each
    here; the rate limiter holds the learner to ``samples_per_insert`` (2
    replayed sequences of 16 trained steps per env step)."""
    algo, stop = tuned.build("r2d2-stateless-cartpole-ray")
    try:
        result = train(algo, stop, verbose=False)
        stats = algo.replay.stats()
    finally:
        algo.stop()
    tuned.assert_reaches("r2d2-stateless-cartpole-ray", result)
    config, evaluation = algo.config, result["evaluation"]
    assert algo.mode == "ray" and result["num_healthy_workers"] == 2 and len(stats) == 1 and stats[0]["size"] > 0
    assert result["env_steps_sampled"] <= stop["env_steps_sampled"] + config.min_env_steps_per_iteration
    assert evaluation["episodes"] == 10 and evaluation["env_steps_sampled"] <= result["env_steps_sampled"]
    assert result["episode_return_mean"] < evaluation["episode_return_mean"]  # the first actor explores
    per_step = config.samples_per_insert / config.trace_length  # sequences replayed per env step
    slack = per_step * 8 * config.sequence_period + config.distributed.replay_batch_size  # the limiter's
    assert 0 < result["env_steps_trained"] <= per_step * result["env_steps_sampled"] + slack
    assert result["num_weight_syncs"] > 0 and result["learner"]["mean_abs_td_error"] > 0
