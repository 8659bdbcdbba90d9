"""A distributional, noisy DQN run saves, restores and evaluates: C51's logits and the noisy
layers' parameters go through the checkpoint, and `jaxflow evaluate` plays the restored
policy's mean weights greedily, as the run itself does. Ape-X trains a noisy QR-DQN head."""

from __future__ import annotations

import jax
import numpy as np

from jaxflow import Algorithm
from jaxflow.api import cli

SHORT = dict(
    env="CartPole-v1",
    c51=True,
    v_min=0.0,
    v_max=100.0,
    num_atoms=11,
    noisy=True,
    hidden_sizes=(32,),
    learning_starts=200,
    min_env_steps_per_iteration=400,
    # Sampled and replayed in the driver: the checkpoint's parameters are what is tested, and
    # rollout and shard actors, started again by the restore, took most of this test's time.
    num_workers=0,
    replay_in_driver=True,
    seed=2,
)


def test_c51_noisy_run_restores_and_evaluates_from_the_cli(ray_local, tmp_path, capsys):
    algo = Algorithm.build("DQN", **SHORT)
    try:
        # One iteration trains (learning_starts is half of it); the restored run's next
        # iteration shows that training resumes after it.
        result = algo.train()
        path = algo.save(str(tmp_path))
        saved = jax.device_get(algo.learner.state.params)
        in_process = algo.evaluate(episodes=3, seed=11)
    finally:
        algo.stop()
    assert result["env_steps_trained"] > 0 and np.isfinite(result["learner"]["mean_q"])
    head = saved["params"]["NoisyDense_1"]  # the dueling advantage: 2 actions x 11 atoms, noisy
    assert head["mu_w"].shape == (32, 22) and head["sigma_w"].shape == (32, 22)
    restored = Algorithm.restore(path)
    try:
        assert all(
            np.array_equal(a, b)
            for a, b in zip(
                jax.tree_util.tree_leaves(saved),
                jax.tree_util.tree_leaves(jax.device_get(restored.learner.state.params)),
            )
        )
        assert restored.train()["training_iteration"] == 2
    finally:
        restored.stop()
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path), "--episodes", "3", "--seed", "11"]) == 0
    # The greedy policy has no noise: the CLI's restored policy and the run agree exactly.
    assert f"mean {in_process['return_mean']:.2f}" in capsys.readouterr().out


MAX_ITERATIONS = 20
"""Ape-X iterations (500 env steps each) the noisy quantile run may take to fill both shards."""


def test_apex_trains_a_noisy_quantile_head_on_its_actors_and_shards(ray_local):
    """Ape-X with QR-DQN and noisy layers, exploring by the noise alone (every actor's epsilon
    0): the learner's per-sample quantile losses go back to both shards as priorities."""
    algo = Algorithm.build(
        "APEX",
        env="CartPole-v1",
        qr=True,
        num_quantiles=16,
        noisy=True,
        worker_epsilon_base=0.0,
        hidden_sizes=(32,),
        learning_starts=100,
        min_env_steps_per_iteration=500,
        # One actor: its batches go to both shards all the same (each to one drawn at random),
        # and every actor is a process that takes seconds to start.
        num_workers=1,
        seed=4,
    )
    try:
        # Each stored batch goes to a shard drawn at random: the first few may all land on one
        # (how many arrive before the second update depends on this machine's pace), so train
        # until both shards hold transitions, within a bound.
        for _ in range(MAX_ITERATIONS):
            result = algo.train()
            stats = algo.replay.stats()
            if result["num_updates"] >= 2 and all(s["size"] > 0 for s in stats):
                break
    finally:
        algo.stop()
    assert result["learner"]["mean_abs_td_error"] > 0 and np.isfinite(result["learner"]["mean_q"])
    assert result["num_updates"] >= 2 and len(stats) == 2 and all(s["size"] > 0 for s in stats)
