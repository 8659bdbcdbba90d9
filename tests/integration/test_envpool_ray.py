"""PPO on CartPole-v1 with vector_env="envpool" on two real Ray rollout workers: the workers
step envpool's vector envs, and the run's counters and episode statistics are exact."""

from __future__ import annotations

import numpy as np
import ray

from jaxflow import Algorithm

WORKERS, ENVS, T = 2, 4, 32
BATCH = WORKERS * ENVS * T
"""One fragment of each worker per iteration."""


def test_ppo_trains_on_envpool_cartpole_through_two_ray_workers(ray_local):
    algo = Algorithm.build(
        "PPO", env="CartPole-v1", vector_env="envpool", num_workers=WORKERS, num_envs_per_worker=ENVS,
        rollout_fragment_length=T, train_batch_size=BATCH, minibatch_size=64, seed=0,
    )  # fmt: skip
    try:
        results = [algo.train() for _ in range(3)]
        backends = {
            ray.get(worker.__ray_call__.remote(lambda w: type(w.envs[0]).__name__)) for _, worker in algo.workers.live()
        }
    finally:
        algo.stop()
    assert backends == {"EnvPoolVectorEnv"}
    assert [r["env_steps_sampled"] for r in results] == [BATCH, 2 * BATCH, 3 * BATCH]
    last = results[-1]
    assert last["env_steps_trained"] == 3 * BATCH and last["num_updates"] == 3
    assert last["num_worker_restarts"] == 0 and np.isfinite(last["learner"]["loss"])
    # CartPole pays 1 a step: a return equal to its length means no reset step (reward 0)
    # of envpool's own leaked into an episode.
    assert last["episodes"] > 0 and 8 < last["episode_len_mean"] <= 500
    assert last["episode_return_mean"] == last["episode_len_mean"]
    assert last["episode_return_max"] <= 500
