"""Device mode end to end: every algorithm that has it, through the CLI with checkpoints,
and a resume in a fresh process that continues bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxflow import Algorithm
from jaxflow.api import checkpoint, checkpoint_state, cli
from jaxflow.api.loop import train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARTPOLE = "gymnax/CartPole-v1"


@pytest.mark.parametrize("name", ["A2C", "IMPALA", "APPO"])
def test_on_policy_algorithms_run_on_the_device(name):
    algo = Algorithm.build(name, env=CARTPOLE, iterations_per_call=2, min_env_steps_per_iteration=0)
    results = [algo.train() for _ in range(3)]
    r = results[-1]
    # One result is one compiled call of iterations_per_call rollout-and-update iterations,
    # and training_iteration counts iterations, as it does in Ray mode.
    assert algo.mode == "device" and [x["training_iteration"] for x in results] == [2, 4, 6]
    assert r["iterations_this_result"] == 2
    assert r["env_steps_sampled"] == r["env_steps_trained"] == 3 * 2 * algo.program.steps_per_iteration
    assert r["num_updates"] == 6 and r["episodes"] > 0
    assert np.isfinite(r["learner"]["loss"]) and np.isfinite(r["episode_return_mean"])


def test_stop_at_a_training_iteration_means_the_same_rollouts_and_updates_on_the_device(tmp_path):
    """--stop training_iteration=6 with 2 iterations per compiled call: three calls, six
    rollouts of num_envs x rollout_fragment_length steps, six updates; a checkpoint is
    written when a result passes a multiple of checkpoint_every (3: at 4, not 2) and at the end.
    (A2C's run in test_on_policy_algorithms_run_on_the_device: one compiled program for both.)"""
    algo = Algorithm.build("A2C", env=CARTPOLE, iterations_per_call=2, min_env_steps_per_iteration=0)
    result = train(algo, {"training_iteration": 6}, str(tmp_path), checkpoint_every=3, verbose=False)
    assert result["training_iteration"] == 6 and result["num_updates"] == 6
    assert result["env_steps_sampled"] == 6 * algo.program.steps_per_iteration
    saved = sorted(d for d in os.listdir(tmp_path) if d.startswith("checkpoint_"))
    assert saved == ["checkpoint_000004", "checkpoint_000006"]
    algo.stop()


def test_dqn_trains_from_an_on_device_replay_buffer():
    """DQN on gymnax CartPole: nothing is trained before learning_starts, then the replay ratio
    is the configured one (8), the target network moves, and the greedy return beats a random
    policy (~22) clearly within 40k env steps."""
    algo = Algorithm.build("DQN", env=CARTPOLE, learning_starts=1_000, seed=0)
    initial_target = jax.device_get(algo.program.state.train.target_params)
    first = algo.train()
    steps_per_call = algo.config.device.iterations_per_call * algo.program.steps_per_iteration
    assert first["env_steps_sampled"] == 2 * steps_per_call  # min_env_steps_per_iteration=2000 takes 2 calls
    # 1,000 transitions arrive after 8 iterations of 128: the first 7 train nothing.
    assert first["env_steps_trained"] == (20 - 7) * 16 * 64
    result = train(algo, {"env_steps_sampled": 40_000}, verbose=False)
    replay = algo.program.state.replay
    assert int(replay.size[0]) == min(algo.config.buffer_size, result["env_steps_sampled"])
    target = jax.device_get(algo.program.state.train.target_params)
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(initial_target), jax.tree.leaves(target)))
    assert result["episode_return_mean"] > 100, result
    assert algo.evaluate(episodes=3)["return_mean"] > 100


def test_the_replay_ratio_counts_the_devices_environments():
    """samples_per_insert is per env step whatever num_envs is: with num_envs (2) below Ray
    mode's num_envs_per_worker (8), each fragment of 2 x 32 steps trains 2 x 32 x 4 / 16 SGD
    steps of 16, not 8 envs' worth (the SGD steps once counted num_envs_per_worker: 4x the ratio)."""
    num_envs = 2
    algo = Algorithm.build(
        "DQN",
        env=CARTPOLE,
        num_envs=num_envs,
        rollout_fragment_length=32,
        samples_per_insert=4.0,
        train_batch_size=16,
        learning_starts=1,
        iterations_per_call=1,
        min_env_steps_per_iteration=0,
    )
    for _ in range(3):
        result = algo.train()
    assert result["env_steps_sampled"] == 3 * num_envs * 32
    assert result["env_steps_trained"] == 4 * result["env_steps_sampled"]
    assert result["num_updates"] == 3
    algo.stop()


def test_ppo_runs_on_minatar_breakout():
    algo = Algorithm.build("PPO", env="gymnax/Breakout-MinAtar", num_envs=16, iterations_per_call=2)
    r = algo.train()
    assert algo.network.obs_ndim == 3  # [10, 10, 4] grids go to the MLP, flattened
    assert r["env_steps_sampled"] == 2 * 16 * 32 and np.isfinite(r["learner"]["loss"])


def _jaxflow(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "jaxflow.api.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


SMALL = ["--set", "num_envs=8", "--set", "minibatch_size=64", "--set", "iterations_per_call=1"]


def test_cli_resume_in_a_fresh_process_is_bit_exact(tmp_path, capsys):
    """A population of 2 under population-based training (a step every 2 iterations): 5
    iterations here (the CLI in this process), checkpoint, a new process restores and runs 5
    more: parameters, optimizer
    state, environment states, RNG, each member's hyperparameters and PBT record equal those of
    10 uninterrupted iterations, bit for bit, and so does the lineage in the results."""
    logdir = str(tmp_path / "run")
    pbt = ["--num-seeds", "2", "--pbt", "lr", "--set", "pbt_interval=2"]
    first = ["train", "--algo", "PPO", "--env", CARTPOLE, *SMALL, *pbt, "--stop", "training_iteration=5"]
    assert cli.main([*first, "--logdir", logdir]) == 0
    out = capsys.readouterr().out
    assert "mode device (auto): 2 agents in one compiled function, population-based training of lr" in out
    second = _jaxflow("train", "--resume", logdir, "--stop", "training_iteration=10", "--quiet")
    assert "resuming PPO" in second.stdout and "iteration 10" in second.stdout

    algo = Algorithm.build(
        "PPO",
        env=CARTPOLE,
        num_envs=8,
        minibatch_size=64,
        iterations_per_call=1,
        num_seeds=2,
        pbt=("lr",),
        pbt_interval=2,
    )
    for _ in range(10):
        expected = algo.train()
    resumed = checkpoint_state.restore_state(checkpoint.latest(logdir), algo.program.get_state())
    leaves = jax.tree_util.tree_leaves_with_path(algo.program.get_state())
    assert any("pbt" in jax.tree_util.keystr(path) for path, _ in leaves)
    for (path, a), b in zip(leaves, jax.tree.leaves(resumed)):
        np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))
    assert (
        checkpoint.load_meta(checkpoint.latest(logdir))["context"]["counters"]["env_steps_sampled"]
        == expected["env_steps_sampled"]
    )
    with open(os.path.join(logdir, "progress.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert [r["training_iteration"] for r in rows] == list(range(1, 11))
    assert rows[-1]["pbt"] == expected["pbt"] and {"member_1/lr", "member_1/parent", "best_member"} <= set(
        expected["pbt"]
    )

    assert cli.main(["evaluate", "--checkpoint", logdir, "--episodes", "2"]) == 0
