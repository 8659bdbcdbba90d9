"""A POPGym environment by id on a Ray rollout worker, under a recurrent PPO: its one-hot
observations, its episodes' fixed length and the run's counters, exactly."""

from __future__ import annotations

import jax
import numpy as np
import ray

from jaxflow import Algorithm

ENV = "popgym/RepeatPreviousEasy-v0"
EPISODE = 51
"""RepeatPreviousEasy's episodes: a deck of 52 cards, one dealt at reset and one per step."""
T, B, LSTM = 32, 2, 8
BATCH = 2 * T * B
"""Two fragments of the one worker per iteration."""


def test_recurrent_ppo_samples_and_trains_on_a_popgym_env_through_a_ray_worker(ray_local):
    algo = Algorithm.build(
        "PPO", env=ENV, mode="ray", use_lstm=True, lstm_size=LSTM, hidden_sizes=(16,), num_workers=1,
        num_envs_per_worker=B, rollout_fragment_length=T, train_batch_size=BATCH, minibatch_size=T, seed=0,
    )  # fmt: skip
    try:
        results = [algo.train() for _ in range(2)]
        [(_, worker)] = algo.workers.live()
        fragment = ray.get(worker.sample.remote()).data  # the worker's steps 2 * BATCH / B onwards
    finally:
        algo.stop()
    last = results[-1]
    assert [r["env_steps_sampled"] for r in results] == [BATCH, 2 * BATCH]
    assert last["env_steps_trained"] == 2 * BATCH and last["num_updates"] == 2
    # 128 steps per env: two whole episodes each, of exactly 51 steps.
    assert last["episodes"] == 2 * B and last["episode_len_mean"] == EPISODE
    assert -1.0 <= last["episode_return_min"] <= last["episode_return_max"] <= 1.0
    assert last["num_worker_restarts"] == 0 and np.isfinite(last["learner"]["loss"])
    obs = fragment["obs"]
    assert obs.shape == (T, B, 4) and (obs.sum(-1) == 1.0).all()  # the suit, one-hot
    first_step = 2 * BATCH // B
    starts = [t for t in range(T) if (first_step + t) % EPISODE == 0]
    assert np.argwhere(fragment["episode_starts"]).tolist() == [[t, b] for t in starts for b in range(B)]
    assert [s.shape for s in jax.tree.leaves(fragment["policy_state"])] == [(B, LSTM)] * 2
