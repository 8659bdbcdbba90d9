"""Fault injection with real Ray actors: a rollout worker process that dies or hangs."""

from __future__ import annotations

import itertools

import pytest

from jaxflow import Algorithm, WorkerCrashedError, WorkerError

# Small fragments so a crash at env step 40 happens in the second or third iteration.
MAX_ITERATIONS_TO_REJOIN = 2000
SMALL = dict(num_envs_per_worker=2, rollout_fragment_length=16, train_batch_size=64, num_workers=2)


def crashing(mode: str, **kw) -> Algorithm:
    return Algorithm.build(
        "A2C",
        env="test/CrashAtStep-v0",
        env_config={"crash_at_step": 40, "crash_worker": 1, **kw},
        on_worker_failure=mode,
        **SMALL,
    )


def test_raise_names_the_worker(ray_local):
    algo = crashing("raise")
    try:
        with pytest.raises(WorkerCrashedError, match="rollout worker 1"):
            for _ in range(10):
                algo.train()
    finally:
        algo.stop()


def test_ignore_continues_with_remaining_workers(ray_local):
    algo = crashing("ignore")
    try:
        results = [algo.train() for _ in range(12)]
    finally:
        algo.stop()
    last = results[-1]
    assert last["num_healthy_workers"] == 1
    assert last["num_worker_restarts"] == 0
    # After the crash only worker 0 samples: 2 envs x 16 steps per round.
    per_iter = [b["env_steps_sampled"] - a["env_steps_sampled"] for a, b in itertools.pairwise(results)]
    assert per_iter[-1] == 64  # ConcatBatches(64) now needs two rounds of 32 from the survivor
    assert last["env_steps_trained"] == last["env_steps_sampled"]


@pytest.mark.parametrize("mode", ["exit", "hang"])
def test_restart_recreates_and_finishes_healthy(ray_local, mode):
    algo = Algorithm.build(
        "A2C",
        env="test/CrashAtStep-v0",
        env_config={"crash_at_step": 40, "crash_worker": 1, "mode": mode},
        on_worker_failure="restart",
        worker_timeout_s=5.0,
        **SMALL,
    )
    try:
        # The survivor samples while the new worker starts (a process importing JAX); it
        # joins within the iteration cap.
        results = [algo.train() for _ in range(12)]
        while results[-1]["num_healthy_workers"] < 2 and len(results) < MAX_ITERATIONS_TO_REJOIN:
            results.append(algo.train())
        results.append(algo.train())
    finally:
        algo.stop()
    last = results[-1]
    assert last["num_worker_restarts"] >= 1
    assert last["num_healthy_workers"] == 2
    # Both workers sample again: one round (2 workers x 2 envs x 16 steps) fills a batch.
    assert last["env_steps_sampled"] - results[-2]["env_steps_sampled"] == 64


def test_error_inside_worker_names_env_and_space(ray_local):
    algo = Algorithm.build("A2C", env="test/WrongObservationShape-v0", **SMALL)
    try:
        with pytest.raises(WorkerError, match=r"WrongObservationShape-v0.*shape \(3,\)"):
            algo.train()
    finally:
        algo.stop()
