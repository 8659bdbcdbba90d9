"""Evaluation during training: the greedy policy's episodes every evaluation_interval
iterations, apart from training (its counters and, in device mode, its numbers bit for bit)."""

from __future__ import annotations

import json
import re

import jax
import numpy as np

from jaxflow import Algorithm
from jaxflow.api.loop import train
from jaxflow.rollout.evaluation import EVALUATION_BATCH, compiled_greedy, evaluate_policy

DEVICE = dict(env="gymnax/CartPole-v1", num_envs=8, iterations_per_call=2, seed=4)
SMALL_PPO = dict(env="CartPole-v1", num_workers=0, train_batch_size=128, minibatch_size=64, num_epochs=1, seed=2)


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
            k: v
            for k, v in r.items()
            if k not in ("evaluation", "evaluations", "time_s", "time_this_iter_s", "env_steps_per_s")
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


def test_every_due_evaluation_is_reported_once_in_order_by_the_end_of_the_run(ray_local, tmp_path, capsys):
    """Ray mode's evaluator actor plays behind training (its start alone outlasts these six
    short iterations); each due evaluation is still reported once, in order, with the first
    row after it finished, the run's last row waiting for those still playing."""
    algo = Algorithm.build("PPO", evaluation_interval=2, evaluation_episodes=2, **SMALL_PPO)
    try:
        train(algo, {"training_iteration": 6}, str(tmp_path), loggers=("jsonl",))
    finally:
        algo.stop()
    with open(tmp_path / "progress.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4, 5, 6]
    reported = [(r["training_iteration"], e) for r in rows for e in r.get("evaluations", [])]
    assert [e["training_iteration"] for _, e in reported] == [2, 4, 6]
    steps = {r["training_iteration"]: r["env_steps_sampled"] for r in rows}
    for at, e in reported:  # the policy it played is named, and reported no earlier than it was due
        assert e["env_steps_sampled"] == steps[e["training_iteration"]] and at >= e["training_iteration"]
        assert e["episodes"] == 2 and 8 <= e["episode_return_mean"] <= 500
    assert all(r["evaluation"] == r["evaluations"][-1] for r in rows if "evaluations" in r)
    assert rows[-1]["evaluation"]["training_iteration"] == 6  # the last one waited for
    # the console line of each row shows the evaluations it reports
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("iter ")]
    shown = [[int(i) for i in re.findall(r"eval -?[\d.]+ \(iter (\d+)\)", line)] for line in lines]
    assert shown == [[e["training_iteration"] for e in r.get("evaluations", [])] for r in rows]


def test_a_run_stopped_by_an_evaluation_ends_on_the_evaluation_that_stopped_it(ray_local, tmp_path):
    """Stopped by ``evaluation/episode_return_mean``: the row that met it started the next
    evaluation (interval 1), which the run waits for and reports under ``evaluations``, but the
    row's ``evaluation`` stays the one the stop was judged on."""
    algo = Algorithm.build("PPO", evaluation_interval=1, evaluation_episodes=2, **SMALL_PPO)
    stop = {"evaluation/episode_return_mean": 1.0, "training_iteration": 30}  # CartPole returns at least 8
    try:
        last = train(algo, stop, str(tmp_path), loggers=("jsonl",))
    finally:
        algo.stop()
    judged, reported = last["evaluation"], last["evaluations"]
    assert judged["episode_return_mean"] >= 1.0 and last["training_iteration"] < 30
    at = reported.index(judged)
    assert at < len(reported) - 1  # the evaluation started with the stopping row came after it
    assert [e["training_iteration"] for e in reported[at + 1 :]] == list(
        range(judged["training_iteration"] + 1, last["training_iteration"] + 1)
    )


def test_a_restored_run_evaluates_on_its_interval_from_where_it_left_off(tmp_path):
    """A run restored at iteration 5 with an interval of 4 evaluates at 8, not on its first result."""
    fields = dict(DEVICE, iterations_per_call=1, evaluation_interval=4, evaluation_episodes=2)
    algo = Algorithm.build("PPO", **fields)
    first = [algo.train() for _ in range(5)]
    path = algo.save(str(tmp_path))
    restored = Algorithm.restore(path)
    later = [restored.train() for _ in range(3)]
    evaluated = [e["training_iteration"] for r in first + later for e in r.get("evaluations", [])]
    assert [r["training_iteration"] for r in later] == [6, 7, 8] and evaluated == [4, 8]
