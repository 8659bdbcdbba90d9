"""Evaluation during training: the greedy policy's episodes every evaluation_interval
iterations, apart from training (its counters and, in device mode, its numbers bit for bit)."""

from __future__ import annotations

import jax
import numpy as np

from jaxflow import Algorithm

DEVICE = dict(env="gymnax/CartPole-v1", num_envs=8, iterations_per_call=2, seed=4)


def test_device_mode_evaluates_on_the_interval_and_leaves_training_alone():
    plain = Algorithm.build("PPO", **DEVICE)
    evaluated = Algorithm.build("PPO", evaluation_interval=3, evaluation_episodes=3, **DEVICE)
    plain_results = [plain.train() for _ in range(3)]
    results = [evaluated.train() for _ in range(3)]
    # a result covers 2 iterations: it evaluates when it passes a multiple of 3 (3 in 3-4, 6 in 5-6; none in 1-2)
    assert "evaluation" not in results[0]
    assert [r["evaluation"]["training_iteration"] for r in results[1:]] == [4, 6]
    for r in results[1:]:
        e = r["evaluation"]
        assert e["episodes"] == 3 and e["env_steps_sampled"] == r["env_steps_sampled"]
        assert 8 <= e["episode_return_mean"] <= 500 and e["episode_len_mean"] == e["episode_return_mean"]
    # training's counters, metrics and parameters are those of the run without evaluation
    for r, p in zip(results, plain_results):
        assert {
            k: v for k, v in r.items() if k not in ("evaluation", "time_s", "time_this_iter_s", "env_steps_per_s")
        } == {k: v for k, v in p.items() if k not in ("time_s", "time_this_iter_s", "env_steps_per_s")}
    jax.tree.map(np.testing.assert_array_equal, evaluated.program.get_weights(), plain.program.get_weights())
