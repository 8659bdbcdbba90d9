"""DQN and Ape-X on real Ray: replay contents checkpointed with the learner, a killed
replay shard restored from the last checkpoint, the learner thread and its queues."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from typing import Any

import gymnasium
import numpy as np
import optax
import pytest
import ray

from jaxflow import (
    Algorithm,
    Dequeue,
    Enqueue,
    Learner,
    LearnerThreadError,
    LocalReplay,
    ReplayShard,
    SampleBatch,
    envs,
    from_items,
)
from jaxflow.dataflow.iterators import NOT_READY

SMALL = dict(
    env="CartPole-v1",
    num_workers=1,
    num_envs_per_worker=4,
    rollout_fragment_length=16,
    learning_starts=200,
    buffer_size=20_000,
    min_env_steps_per_iteration=512,
    seed=5,
)


SHARDS = 2
"""Shard actors of :func:`sharded_run`: one to kill and restart, one that lives on."""


@dataclasses.dataclass(frozen=True)
class ShardedRun:
    """What :func:`sharded_run` saw: its checkpoint and the shards' sizes around it, and its
    results after shard 1 was killed."""

    path: str
    steps_at_save: int
    sizes_at_save: list[int]
    sizes_before_kill: list[int]
    after_kill: list[dict[str, Any]]
    num_restarts: int
    restored_sizes: dict[int, int]


@pytest.fixture(scope="module")
def sharded_run(ray_local, tmp_path_factory) -> ShardedRun:
    """One DQN run on two shard actors that restart (``on_worker_failure="restart"``): two
    iterations, a checkpoint, two more, shard 1 killed, two more. The two tests that each
    trained such a run share it: ``test_replay_is_checkpointed_with_the_learner_and_resumed``
    restores its checkpoint, ``test_killed_replay_shard_restarts_from_the_last_checkpoint``
    checks what the kill left."""
    algo = Algorithm.build("DQN", num_replay_shards=SHARDS, on_worker_failure="restart", **SMALL)
    try:
        for _ in range(2):
            algo.train()
        path = algo.save(str(tmp_path_factory.mktemp("sharded_run")))
        steps_at_save = algo.last_result["env_steps_sampled"]
        sizes_at_save = [s["size"] for s in algo.replay.stats()]
        for _ in range(2):
            algo.train()
        sizes_before_kill = [s["size"] for s in algo.replay.stats()]
        ray.kill(algo.replay.actors[1], no_restart=True)
        after_kill = [algo.train() for _ in range(2)]
        return ShardedRun(
            path,
            steps_at_save,
            sizes_at_save,
            sizes_before_kill,
            after_kill,
            algo.replay.num_restarts,
            algo.replay.restored_sizes,
        )
    finally:
        algo.stop()


def test_replay_is_checkpointed_with_the_learner_and_resumed(sharded_run):
    sizes, path = sharded_run.sizes_at_save, sharded_run.path
    assert all(size > 0 for size in sizes)
    meta = json.load(open(os.path.join(path, "meta.json")))
    capacity = SMALL["buffer_size"] // SHARDS  # the buffer split evenly over the shards
    assert meta["replay_shards"] == [{"size": size, "capacity": capacity} for size in sizes]
    restored = Algorithm.restore(path)
    try:
        assert [s["size"] for s in restored.replay.stats()] == sizes
        assert restored.learner.state.target_params is not None
        result = restored.train()
        assert result["env_steps_sampled"] > sharded_run.steps_at_save and result["num_updates"] > 0
    finally:
        restored.stop()
    assert path.endswith("checkpoint_000002")


def assert_same_state(a: dict, b: dict) -> None:
    assert a["buffer"].keys() == b["buffer"].keys()
    for k, v in a["buffer"].items():
        if isinstance(v, np.ndarray):
            assert v.dtype == b["buffer"][k].dtype and np.array_equal(v, b["buffer"][k]), k
        else:
            assert v == b["buffer"][k], k
    assert {k: v for k, v in a.items() if k != "buffer"} == {k: v for k, v in b.items() if k != "buffer"}


def test_replay_lives_in_the_driver_without_workers_and_checkpoints_bit_exactly(ray_local, tmp_path):
    """num_workers=0: the driver samples, so its one prioritized shard is an object of this
    process (no actor, no Ray call per store, sample or priority update); a checkpoint holds
    its contents, priorities, counters and generator, restored bit for bit, so the restored
    run draws the same batch the saved one would have."""
    algo = Algorithm.build("DQN", **dict(SMALL, num_workers=0))
    try:
        for _ in range(2):
            algo.train()
        assert isinstance(algo.replay, LocalReplay) and type(algo.replay.shard) is ReplayShard
        algo.save(str(tmp_path))
        saved = algo.replay.shard.get_state()  # copies
        next_batch = algo.replay.shard.sample(64, 0.5)
    finally:
        algo.stop()
    assert saved["inserted"] > 0 and saved["sampled"] > 0
    assert len(np.unique(saved["buffer"]["masses"])) > 2  # TD errors became priorities
    restored = Algorithm.restore(str(tmp_path))
    try:
        assert isinstance(restored.replay, LocalReplay)
        assert_same_state(restored.replay.shard.get_state(), saved)
        again = restored.replay.shard.sample(64, 0.5)
        assert np.array_equal(again.indices, next_batch.indices) and np.array_equal(again.weights, next_batch.weights)
        assert all(np.array_equal(again.data[k], v) for k, v in next_batch.data.items())
        assert restored.train()["num_updates"] > 0
    finally:
        restored.stop()


def test_replay_in_driver_with_rollout_workers_stores_their_fragments_and_checkpoints(ray_local, tmp_path):
    """replay_in_driver=True keeps the one shard in the driver's process with a rollout worker
    too: every fragment the worker sent is stored there (no shard actor), TD errors become its
    priorities, and a checkpoint restores it whole into the same kind of replay."""
    algo = Algorithm.build("DQN", **dict(SMALL, replay_in_driver=True))
    try:
        for _ in range(2):
            result = algo.train()
        assert isinstance(algo.replay, LocalReplay) and type(algo.replay.shard) is ReplayShard
        algo.save(str(tmp_path))
        saved = algo.replay.shard.get_state()
    finally:
        algo.stop()
    assert result["num_updates"] > 0
    assert saved["inserted"] == result["env_steps_sampled"]  # the worker's fragments, every step
    assert len(np.unique(saved["buffer"]["masses"])) > 2
    restored = Algorithm.restore(str(tmp_path))
    try:
        assert isinstance(restored.replay, LocalReplay)
        assert_same_state(restored.replay.shard.get_state(), saved)
    finally:
        restored.stop()


@pytest.mark.parametrize("algo_name", ["APEX", "R2D2"])
def test_learner_thread_plans_replay_from_the_driver_process_when_asked(ray_local, algo_name):
    """Ape-X's plan (and R2D2's, with its sequence shard) runs on a replay in the driver's
    process: every fragment the actors sent is stored, and the learner thread is fed."""
    algo = Algorithm.build(
        algo_name,
        env="CartPole-v1",
        # One actor: its fragments reach the driver's replay by the same store subflow as
        # several actors' would, and each actor is a process that takes seconds to start.
        num_workers=1,
        num_replay_shards=1,
        replay_in_driver=True,
        learning_starts=200,
        min_env_steps_per_iteration=1_000,
        seed=1,
    )
    try:
        # R2D2's shard never holds the actors back, so iterations may end before the learner
        # thread's first (compiling) update: train until two iterations have updates, or 20.
        results = [algo.train()]
        while sum(r["num_updates"] > 0 for r in results) < 2 and len(results) < 20:
            results.append(algo.train())
    finally:
        algo.stop()  # the store subflow runs in its own thread: counted once it has stopped
    (stats,) = algo.replay.stats()
    assert isinstance(algo.replay, LocalReplay)
    assert type(algo.replay.shard).__name__ == {"APEX": "ReplayShard", "R2D2": "SequenceShard"}[algo_name]
    sampled = algo.context.counters["env_steps_sampled"]
    assert stats["inserted"] == sampled >= results[-1]["env_steps_sampled"] and stats["sampled"] > 0, stats
    assert results[-1]["num_updates"] > results[-2]["num_updates"] > 0, [r["num_updates"] for r in results]


def test_killed_replay_shard_restarts_from_the_last_checkpoint(sharded_run):
    saved, results = sharded_run.sizes_at_save, sharded_run.after_kill
    assert sharded_run.sizes_before_kill[1] > saved[1]  # more was stored after the checkpoint
    assert sharded_run.num_restarts == 1
    assert sharded_run.restored_sizes == {1: saved[1]}
    assert results[-1]["env_steps_sampled"] > results[0]["env_steps_sampled"]
    assert results[-1]["num_updates"] > results[0]["num_updates"]


def test_killed_replay_shard_raises_by_default(ray_local):
    # One shard actor: the one killed is named whether or not another lives beside it.
    algo = Algorithm.build("DQN", num_replay_shards=1, **SMALL)
    try:
        algo.train()
        ray.kill(algo.replay.actors[0], no_restart=True)
        with pytest.raises(Exception, match="replay shard 0 failed"):
            for _ in range(3):
                algo.train()
    finally:
        algo.stop()


def test_apex_runs_its_three_subflows(ray_local):
    algo = Algorithm.build(
        "APEX",
        env="CartPole-v1",
        num_workers=2,
        num_replay_shards=2,
        learning_starts=200,
        train_batch_size=64,
        replay_batch_size=128,
        min_env_steps_per_iteration=2_000,
        max_weight_sync_delay=100,
        seed=1,
    )
    try:
        results = [algo.train() for _ in range(3)]
        stats = algo.replay.stats()
    finally:
        algo.stop()
    last = results[-1]
    # Each learner update is one replayed batch of 128, taken as two SGD steps of 64.
    assert last["num_updates"] > 0 and last["env_steps_trained"] == 128 * last["num_updates"]
    assert algo.learner.version >= 2 * (last["num_updates"])
    assert last["num_weight_syncs"] >= 2  # both actors got weights back
    assert all(s["inserted"] > 0 and s["sampled"] > 0 for s in stats)
    queues = algo.context.info["queues"]
    assert queues["learner_updates"] >= last["num_updates"] - 4  # at most a queue's worth in flight
    assert queues["enqueue_wait_s"] > 0 and queues["dequeue_wait_s"] > 0  # both sides measured their waits


def flat(data: dict) -> SampleBatch:
    """A fragment of one time step whose learner arrays are ``data``."""
    n = len(next(iter(data.values())))
    return SampleBatch({k: v[None] for k, v in data.items()}, n, np.zeros(0), np.zeros(0), 0)


def _toy_learner():
    def loss_fn(params, batch, rng):
        err = params["w"] * batch["x"] - batch["y"]
        return (err**2).mean(), {"td_error": err}

    return Learner(loss_fn, optax.sgd(0.1), {"w": np.float32(0.0)})


def test_learner_thread_round_trip_keeps_order_and_per_sample_metrics():
    learner = _toy_learner()
    thread = learner.start_thread()
    try:
        batches = [flat({"x": np.full(4, float(i + 1), np.float32), "y": np.zeros(4, np.float32)}) for i in range(5)]
        fed = from_items(batches).for_each(Enqueue(thread))
        for _ in batches:
            next(fed)
        out = Dequeue(thread)
        results = []
        # Dequeue says NOT_READY while an update is still running (the first one compiles,
        # which on a loaded 2-core machine takes longer than Dequeue's half-second wait).
        for _ in range(200):
            item = out._pull()
            if item is not NOT_READY:
                results.append(item)
            if len(results) == 5:
                break
        assert [b.data["x"][0, 0] for b, _ in results] == [1.0, 2.0, 3.0, 4.0, 5.0]
        assert all(m["td_error"].shape == (4,) for _, m in results)
        assert learner.version == 5 and thread.stats["updates"] == 5
    finally:
        learner.stop()


def test_learner_thread_failure_is_raised_in_the_plan():
    learner = _toy_learner()
    thread = learner.start_thread()
    try:
        thread.inqueue.put(flat({"x": np.ones(3, np.float32)}))  # no "y": the loss raises
        out = Dequeue(thread)
        with pytest.raises(LearnerThreadError, match="learner thread failed"):
            for _ in range(20):
                out._pull()
    finally:
        learner.stop()


def test_enqueue_blocks_while_the_queue_is_full_without_spinning():
    learner = _toy_learner()
    thread = learner.start_thread(inqueue_size=1, outqueue_size=1)
    try:
        batch = flat({"x": np.ones(2, np.float32), "y": np.ones(2, np.float32)})
        fed = from_items([batch] * 4).for_each(Enqueue(thread))
        done = threading.Event()

        def feed():
            for _ in range(4):
                next(fed)
            done.set()

        threading.Thread(target=feed, daemon=True).start()
        # Output queue of 1 + the item in update + input queue of 1: the fourth put must wait.
        assert not done.wait(2.0)
        out = Dequeue(thread)
        got = [item for item in (out._pull() for _ in range(8)) if item is not NOT_READY]
        assert done.wait(5.0) and len(got) >= 1
    finally:
        learner.stop()


def _stacked_cartpole(context, **kwargs):
    return gymnasium.wrappers.FrameStackObservation(gymnasium.make("CartPole-v1"), 4)


def test_dqn_with_frame_stacks_replays_consistent_stacks(ray_local):
    """Frame-stacked observations go through the workers' row packing and the shard's
    unpacking: replayed stacks are whole, and with one-step returns the next stack is the
    current one shifted by a frame wherever the episode goes on."""
    envs.register("test/StackedCartPole-v0", _stacked_cartpole)
    algo = Algorithm.build("DQN", **dict(SMALL, env="test/StackedCartPole-v0", num_workers=0, frame_stack=4, n_step=1))
    try:
        results = [algo.train() for _ in range(2)]
        batch = algo.replay.shard.sample(256, 0.4)  # num_workers=0: the replay is in this process
        stats = algo.replay.stats()[0]
    finally:
        algo.stop()
    assert results[-1]["num_updates"] > 0
    obs, next_obs, discounts = batch.data["obs"], batch.data["next_obs"], batch.data["discounts"]
    assert obs.shape == next_obs.shape == (256, 4, 4)
    going_on = discounts > 0
    assert going_on.sum() > 200
    np.testing.assert_array_equal(next_obs[going_on, :-1], obs[going_on, 1:])
    assert not np.array_equal(next_obs[going_on, -1], obs[going_on, -1])
    # Single frames are stored: per fragment of T=16 steps, 16 rows plus the tail observation
    # and at most 3 older frames of the first stack (a reset stack repeats one frame: one row).
    assert stats["size"] <= (16 + 1 + 3) / 16 * stats["inserted"]
