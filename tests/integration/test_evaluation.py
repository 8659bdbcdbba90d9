"""Evaluation during training: the greedy policy's episodes every evaluation_interval
iterations, apart from training (its counters and, in device mode, its numbers bit for bit)."""

from __future__ import annotations

import jax
import numpy as np

from jaxflow import Algorithm
from jaxflow.rollout.evaluation import EVALUATION_BATCH, compiled_greedy, evaluate_policy

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


def test_device_mode_plays_its_evaluation_episodes_in_one_compiled_call():
    algo = Algorithm.build("PPO", env="gymnax/CartPole-v1", num_envs=8, iterations_per_call=1, seed=1)
    algo.train()
    evaluator = algo.program.evaluator
    first, second = algo.evaluate(episodes=6), algo.evaluate(episodes=6, seed=123)
    assert evaluator.traces == 1  # compiled once, reused for other seeds
    for out in (first, second):
        assert out["episodes"] == 6 and out["lengths"] == [int(r) for r in out["returns"]]  # CartPole: +1 per step
        assert all(1 <= n <= 500 for n in out["lengths"])
    assert algo.evaluate(episodes=6) == first  # the same seed plays the same episodes
    # the same greedy policy stepped on the host (gymnax's CartPole behind the CPU wrapper) agrees on average
    host = evaluate_policy(algo.config, algo.program.policy, algo.program.get_weights(), 30)
    device = algo.evaluate(episodes=30)
    assert (
        abs(host["return_mean"] - device["return_mean"])
        <= 4 * (host["return_std"] + device["return_std"]) / 30**0.5 + 1
    )


def test_host_evaluation_plays_its_episodes_side_by_side_as_it_would_one_by_one():
    """Up to EVALUATION_BATCH episodes share each forward pass; every episode keeps its own seed,
    so 20 episodes (a full batch of 16, then 4 beside 12 spare envs) score what each scores alone."""
    algo = Algorithm.build("PPO", env="CartPole-v1", num_workers=0, seed=3)
    try:
        for _ in range(4):
            algo.train()
        config, policy, params = algo.config, algo.program.policy, algo.program.learner.get_weights()
    finally:
        algo.stop()
    envs_kept: list = []
    compiled = compiled_greedy(policy)
    together = evaluate_policy(config, policy, params, 20, 50, kept=(envs_kept, compiled))
    assert len(envs_kept) == EVALUATION_BATCH == 16 and compiled[0]._cache_size() == 1  # one batch size
    alone = [evaluate_policy(config, policy, params, 1, 50 + e) for e in range(20)]
    assert together["returns"] == [a["returns"][0] for a in alone]
    assert together["lengths"] == [a["lengths"][0] for a in alone] == [int(r) for r in together["returns"]]
    assert len(set(together["lengths"])) > 3  # the episodes differ, so a mix-up would show
