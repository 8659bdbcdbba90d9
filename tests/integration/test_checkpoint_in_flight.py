"""A checkpoint of DQN's asynchronous plan on real shard actors holds exactly what its
counters say was stored: the stores still in flight are settled before the replay is saved."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import Any

from jaxflow import Algorithm, ReplayShard, ReplayShards, get_algorithm
from jaxflow.algorithms.dqn.replay import shard_actors, shard_settings
from jaxflow.config.names import make_config
from jaxflow.dataflow.actors import ship_module_by_value

SLOW_ADD_S = 0.5
"""How long a :class:`SlowShard` waits before it stores: far longer than the driver takes to
save, so the stores sent in an iteration's last rounds are still running when it saves."""

RUN = dict(
    env="CartPole-v1",
    num_workers=1,
    num_envs_per_worker=4,
    rollout_fragment_length=16,
    num_replay_shards=2,
    learning_starts=64,
    buffer_size=4096,
    train_batch_size=32,
    hidden_sizes=(16,),
    min_env_steps_per_iteration=256,
    seed=3,
)
"""A tiny DQN run: 64 env steps a fragment, 4 fragments an iteration, nothing overwritten."""


class SlowShard(ReplayShard):
    """A replay shard slow to store: each ``add`` waits :data:`SLOW_ADD_S` first (the actor is
    threaded, so other calls, such as a checkpoint's ``export_state``, run meanwhile)."""

    def add(self, *args: Any, **kwargs: Any) -> int:
        time.sleep(SLOW_ADD_S)
        return super().add(*args, **kwargs)


ship_module_by_value(sys.modules[__name__])  # the shard actors import SlowShard from this file's code


def slow_replay(config: Any) -> ReplayShards:
    """DQN's shard actors (``make_replay``'s settings), each a :class:`SlowShard`."""
    return ReplayShards(
        config.num_replay_shards, **shard_settings(config, None, 0.0), **shard_actors(config), shard_cls=SlowShard
    )


def stored(algo: Algorithm) -> int:
    """Items the run's shards hold now, whatever is still in flight to them."""
    return sum(s["inserted"] for s in algo.replay.stats())


def test_a_checkpoint_holds_every_store_in_flight_and_a_restore_continues_from_the_same_counts(ray_local, tmp_path):
    dqn = get_algorithm("DQN")
    spec = dataclasses.replace(dqn, run=dataclasses.replace(dqn.run, replay=slow_replay))
    algo = Algorithm(make_config(dqn.config_cls, **RUN), spec)
    try:
        sampled = algo.train()["env_steps_sampled"]
        # Stores still in flight when the iteration ended: not counted yet, maybe not stored yet.
        assert algo.context.counters["replay_items_stored"] < sampled
        path = algo.save(str(tmp_path))
    finally:
        algo.stop()
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    counters = meta["context"]["counters"]
    # Every step sampled is one item, each counted as stored once its store was answered.
    assert counters["env_steps_sampled"] == counters["replay_items_stored"] == sampled
    assert counters["replay_items_dropped"] == 0
    restored = Algorithm.restore(path, num_workers=0)  # sampled in the driver: one process less to start
    try:
        # The checkpoint's shards hold exactly the items counted: no store lost, none uncounted.
        assert [s["size"] for s in restored.replay.stats()] == [s["size"] for s in meta["replay_shards"]]
        assert stored(restored) == restored.context.counters["replay_items_stored"] == sampled
        again = restored.train()["env_steps_sampled"]
        restored.replay.settle()
        assert stored(restored) == restored.context.counters["replay_items_stored"] == again > sampled
    finally:
        restored.stop()
