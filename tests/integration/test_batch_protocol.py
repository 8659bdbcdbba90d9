"""The Batch protocol: a kind of batch defined here, which no operator has heard of, goes
through ConcatBatches, StoreToReplay, ToDevice, TrainOneStep, a learner thread and
UpdatePriorities, with its own counts, arrays and priority routing."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import optax
import ray

from jaxflow import (
    ConcatBatches,
    Dequeue,
    Enqueue,
    Learner,
    ParallelReplay,
    ReplayShards,
    StoreToReplay,
    ToDevice,
    TrainOneStep,
    UpdatePriorities,
    from_items,
)
from jaxflow.dataflow.iterators import NOT_READY
from jaxflow.ops.replay_ops import REPLAY_ITEMS_STORED

L = 3  # steps per sequence


class SequenceBatch(NamedTuple):
    """Sequences ``x: [N, L]`` (as a recurrent policy's learner would take them): each
    sequence is one sample of ``L`` env steps."""

    x: np.ndarray

    @property
    def env_steps(self) -> int:
        return self.x.size

    @property
    def num_samples(self) -> int:
        return len(self.x)

    @property
    def weights_version(self) -> int:
        return 7

    @property
    def replay_source(self) -> None:
        return None

    def train_arrays(self) -> dict[str, np.ndarray]:
        return {"x": self.x}

    def replay_rows(self) -> dict[str, np.ndarray]:
        return {"x": self.x, "first": self.x[:, 0]}

    @staticmethod
    def concat(batches: Sequence[SequenceBatch]) -> SequenceBatch:
        return SequenceBatch(np.concatenate([b.x for b in batches]))


def sequences(first: int, n: int) -> SequenceBatch:
    starts = np.arange(first, first + n, dtype=np.float32)
    return SequenceBatch(starts[:, None] * L + np.arange(L, dtype=np.float32))


def sum_learner() -> Learner:
    # loss = w * sum(x) / N; its td_error per sample is the sequence's first step.
    def loss(params, batch, rng):
        return (params["w"] * batch["x"]).sum() / len(batch["x"]), {"td_error": batch["x"][:, 0]}

    return Learner(loss, optax.sgd(0.5), {"w": np.float32(0.0)})


def test_a_new_batch_kind_is_joined_trained_and_counted_by_its_own_account():
    joined = from_items([sequences(0, 2), sequences(2, 2), sequences(4, 2)]).combine(ConcatBatches(12))
    batch = next(joined)
    assert isinstance(batch, SequenceBatch) and batch.x.shape == (4, L)  # 2 batches of 6 env steps each
    learner = sum_learner()
    trained = ToDevice(from_items([batch]), learner).for_each(TrainOneStep(learner))
    metrics = trained.take(1)[0]
    # Mean over 4 sequences of the sum of their steps: (0+1+...+11) / 4 = 16.5 = d loss / d w.
    assert np.isclose(float(learner.get_weights()["w"]), -0.5 * 16.5)
    assert float(metrics["loss"]) == 0.0  # evaluated at w = 0
    assert trained.context.counters["env_steps_trained"] == 4  # its samples, not its env steps


def test_a_new_batch_kind_is_stored_replayed_and_reprioritized(ray_local):
    shards = ReplayShards(2, capacity=100, alpha=1.0, seed=0)
    try:
        store = from_items([sequences(0, 5), sequences(5, 5)]).for_each(StoreToReplay(shards, seed=0))
        assert store.take(2)[1].num_samples == 5
        assert store.context.counters[REPLAY_ITEMS_STORED] == 10  # its samples are what a shard holds
        learner = sum_learner()
        thread = learner.start_thread(inqueue_size=2, outqueue_size=2)
        replayed = ParallelReplay(shards, batch_size=4).take(3)
        fed = from_items(replayed).for_each(Enqueue(thread))
        fed.take(3)
        out = Dequeue(thread).for_each(UpdatePriorities(shards, priority_eps=1.0))
        # Up to 100 pulls (each waits at most the queue's poll time) until 3 results have come.
        results = list(itertools.islice((r for r in (out._pull() for _ in range(100)) if r is not NOT_READY), 3))
        assert len(results) == 3
        masses = [s["buffer"]["masses"] for s in ray.get([a.get_state.remote() for a in shards.actors])]
        for batch, _ in results:
            assert batch.replay_source.shard == batch.shard
            # alpha = 1: each replayed slot's mass is its new priority, its first step + 1.
            np.testing.assert_allclose(masses[batch.shard][batch.indices], batch.data["first"] + 1.0)
            np.testing.assert_array_equal(batch.data["first"], batch.data["x"][:, 0])
    finally:
        learner.stop()
        shards.stop()
