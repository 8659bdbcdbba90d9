"""Sharded replay on real Ray actors: routing, priority updates, the Reverb-style rate limiter, state."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import ray

from jaxflow.config.fields import ConfigError
from jaxflow.dataflow.actors import ship_module_by_value
from jaxflow.dataflow.iterators import from_items
from jaxflow.ops.replay_ops import (
    REPLAY_ITEMS_DROPPED,
    REPLAY_ITEMS_STORED,
    ParallelReplay,
    StoreToReplay,
    UpdatePriorities,
)
from jaxflow.replay.replayed import ReplayBatch
from jaxflow.replay.saved import check_fits, check_record, read_bytes
from jaxflow.replay.shard import ReplayShard, ReplayShardError
from jaxflow.replay.shards import ReplayShards
from jaxflow.rollout.batch import SampleBatch

ALPHA = 0.6

NUM_SHARDS = 2
"""Shards of the routing and priority tests: each shard actor is a process of its own that
takes seconds to start, and two prove what more would (every item in exactly one shard, each
priority on its own shard's slot), with a random route that can take either."""


KILL_TIMEOUT_S = 30.0


def kill(actor) -> None:
    """``ray.kill``, then wait until the actor answers no more: the kill is asynchronous, and a
    call made at once (on a loaded machine) may still be answered by the actor about to die."""
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + KILL_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=KILL_TIMEOUT_S)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"{actor} still answers {KILL_TIMEOUT_S} s after ray.kill")


def fragment(first_id: int, T: int = 5, B: int = 2) -> SampleBatch:
    """A time-major fragment whose items carry consecutive ids in flattened [T * B] order."""
    ids = np.arange(first_id, first_id + T * B).reshape(T, B)
    data = {"id": ids, "obs": np.stack([ids, -ids], axis=-1).astype(np.float32)}
    return SampleBatch(data, T * B, np.zeros(0), np.zeros(0), 0)


def items(first_id: int, n: int) -> dict[str, np.ndarray]:
    ids = np.arange(first_id, first_id + n)
    return {"id": ids, "obs": np.stack([ids, -ids], axis=-1).astype(np.float32)}


def step(first_id: int, n: int) -> SampleBatch:
    """The same ``n`` items as :func:`items`, as a fragment of one time step (for ``StoreToReplay``)."""
    return fragment(first_id, T=1, B=n)


def shard_ids(shards: ReplayShards) -> list[np.ndarray]:
    return [s["buffer"]["data/id"] for s in ray.get([a.get_state.remote() for a in shards.actors])]


@pytest.fixture
def make_shards(ray_local):
    made: list[ReplayShards] = []

    def make(*args, **kwargs) -> ReplayShards:
        made.append(ReplayShards(*args, **kwargs))
        return made[-1]

    yield make
    for shards in made:
        shards.stop()


@pytest.mark.parametrize("capacity", [1000, 64])
def test_store_routes_each_item_to_exactly_one_shard(make_shards, capacity):
    shards = make_shards(NUM_SHARDS, capacity=capacity, alpha=ALPHA, seed=0)
    store = from_items([fragment(10 * k) for k in range(30)]).for_each(StoreToReplay(shards, seed=1))
    stored = store.take(30)
    assert [b.data["id"][0, 0] for b in stored] == [10 * k for k in range(30)]  # passed on unchanged
    assert store.context.counters[REPLAY_ITEMS_STORED] == 300
    assert store.context.counters[REPLAY_ITEMS_DROPPED] == 0

    stats = shards.stats()
    inserted = [s["inserted"] for s in stats]
    assert sum(inserted) == 300
    assert [s["size"] for s in stats] == [min(n, capacity) for n in inserted]
    evicted = sum(n - s["size"] for n, s in zip(inserted, stats))
    if capacity == 64:
        assert evicted > 0
    else:
        assert evicted == 0 and min(inserted) > 0

    found = np.concatenate(shard_ids(shards))
    assert len(found) == sum(s["size"] for s in stats) == 300 - evicted
    assert len(np.unique(found)) == len(found)  # no id in two shards, nor twice in one
    assert set(found.tolist()) <= set(range(300))


def test_store_to_a_fixed_shard_flattens_time_major(make_shards):
    # The last of two shards: the first, which a default index would pick, stays empty.
    shards = make_shards(2, capacity=100, seed=0)
    from_items([fragment(0, T=4, B=3)]).for_each(StoreToReplay(shards, shard=1)).take(1)
    state = ray.get(shards.actors[1].get_state.remote())["buffer"]
    np.testing.assert_array_equal(state["data/id"], np.arange(12))
    np.testing.assert_array_equal(state["data/obs"][:, 1], -np.arange(12, dtype=np.float32))
    assert [s["size"] for s in shards.stats()] == [0, 12]


def test_update_priorities_land_on_the_right_shard_and_item(make_shards):
    shards = make_shards(NUM_SHARDS, capacity=100, alpha=ALPHA, seed=0)
    from_items([step(25 * k, 25) for k in range(8)]).for_each(StoreToReplay(shards, seed=3)).take(8)
    batches = ParallelReplay(shards, batch_size=8, beta=0.4, num_async=2).take(12)
    assert all(isinstance(b, ReplayBatch) and len(b.indices) == 8 for b in batches)

    def new_priority(ids: np.ndarray) -> np.ndarray:
        return 0.5 + ids.astype(np.float64)

    # UpdatePriorities reads |td_error| + epsilon from the learner's metrics.
    updates = from_items([(b, {"td_error": -new_priority(b.data["id"])}) for b in batches]).for_each(
        UpdatePriorities(shards, priority_eps=0.0)
    )
    assert len(updates.take(12)) == 12

    states = [s["buffer"] for s in ray.get([a.get_state.remote() for a in shards.actors])]
    for b in batches:
        state = states[b.shard]
        np.testing.assert_array_equal(state["data/id"][b.indices], b.data["id"])  # the slot still holds that item
        np.testing.assert_allclose(state["masses"][b.indices], new_priority(b.data["id"]) ** ALPHA, rtol=1e-12)
    # Items never replayed keep the initial priority 1.0, whose mass is 1 for every alpha.
    for shard, state in enumerate(states):
        touched = np.zeros(len(state["masses"]), bool)
        for b in batches:
            if b.shard == shard:
                touched[b.indices] = True
        np.testing.assert_array_equal(state["masses"][~touched], 1.0)


def test_rate_limiter_keeps_the_replay_ratio_in_every_interleaving():
    R, slack, insert_size, batch_size = 8, 512, 10, 32
    shard = ReplayShard(capacity=1000, alpha=ALPHA, seed=0, samples_per_insert=R, error_buffer=slack)
    choose = np.random.default_rng(0)
    inserted = sampled = refused_inserts = refused_samples = 0
    while inserted < 10_000:
        # A random preference each step, falling back to the other call, plays every interleaving of a
        # fast or slow learner; the limiter must admit at least one of the two every time.
        order = ("add", "sample") if choose.random() < 0.5 else ("sample", "add")
        for call in order:
            if call == "add":
                n = shard.add(items(inserted, insert_size))
                refused_inserts += n == 0
                inserted += n
                done = n > 0
            else:
                batch = shard.sample(batch_size)
                refused_samples += batch is None
                sampled += 0 if batch is None else batch_size
                done = batch is not None
            assert abs(sampled - R * inserted) <= slack
            if done:
                break
        else:
            pytest.fail(f"limiter deadlocked at inserted={inserted}, sampled={sampled}")
    stats = shard.stats()
    assert (stats["inserted"], stats["sampled"]) == (inserted, sampled)
    assert (stats["refused_inserts"], stats["refused_samples"]) == (refused_inserts, refused_samples)
    assert refused_inserts > 0 and refused_samples > 0
    assert abs(sampled / inserted - R) <= slack / inserted


def test_rate_limiter_refuses_then_admits_waiting_calls(make_shards):
    shards = make_shards(1, capacity=1000, seed=0, samples_per_insert=8, error_buffer=100)
    shard = shards.actors[0]
    assert ray.get(shard.add.remote(items(0, 10))) == 10  # 8 * 10 - 0 = 80 <= 100
    assert ray.get(shard.add.remote(items(10, 10))) == 0  # 8 * 20 - 0 = 160 > 100: refused at once
    assert ray.get(shard.sample.remote(150)) is not None  # 150 <= 80 + 100
    assert ray.get(shard.sample.remote(32)) is None  # 182 > 180: not ready
    with pytest.raises(ray.exceptions.RayTaskError, match="can never fit"):
        ray.get(shard.sample.remote(201))

    # A waiting sample is admitted by the insert that makes room for it, and not before.
    waiting_sample = shard.sample.remote(32, 0.4, 300.0)
    ready, _ = ray.wait([waiting_sample], timeout=0.5)
    assert not ready
    assert ray.get(shard.add.remote(items(20, 10))) == 10  # 160 - 150 = 10 <= 100
    assert isinstance(ray.get(waiting_sample, timeout=60), ReplayBatch)  # 182 <= 160 + 100

    # A waiting insert is admitted by the sample that makes room for it, and not before.
    assert ray.get(shard.add.remote(items(30, 10))) == 10  # 240 - 182 = 58
    waiting_add = shard.add.remote(items(40, 10), None, 300.0)  # 320 - 182 = 138 > 100
    ready, _ = ray.wait([waiting_add], timeout=0.5)
    assert not ready
    assert ray.get(shard.sample.remote(40)) is not None  # 222 <= 240 + 100
    assert ray.get(waiting_add, timeout=60) == 10  # 320 - 222 = 98 <= 100
    stats = ray.get(shard.stats.remote())
    assert (stats["inserted"], stats["sampled"], stats["size"]) == (40, 222, 40)
    assert (stats["refused_inserts"], stats["refused_samples"]) == (1, 1)


def test_parallel_replay_waits_for_the_limiter(make_shards):
    shards = make_shards(2, capacity=100, seed=0, samples_per_insert=1, error_buffer=8, sample_wait_s=0.05)
    # With nothing stored the shards answer "not ready", which ParallelReplay drops, so a
    # batch can only arrive once an insert admits one.
    from_items([step(0, 4)]).for_each(StoreToReplay(shards, shard=1)).take(1)
    batch = ParallelReplay(shards, batch_size=4).take(1)[0]
    assert batch.shard == 1 and set(batch.data["id"].tolist()) <= {0, 1, 2, 3}


def test_shard_state_round_trip_restores_contents_priorities_and_counters(make_shards):
    config = {"capacity": 50, "alpha": ALPHA, "samples_per_insert": 2, "error_buffer": 40}
    shards = make_shards(1, seed=7, **config)
    shard = shards.actors[0]
    for k in range(7):
        assert ray.get(shard.add.remote(items(10 * k, 10))) == 10  # 70 items into 50 slots
        assert ray.get(shard.sample.remote(20)) is not None
    batch = ray.get(shard.sample.remote(8))
    ray.get(shard.update_priorities.remote(batch.indices, np.linspace(0.1, 3.0, 8)))
    state = ray.get(shard.get_state.remote())

    restored = ReplayShard(seed=123, **config)
    restored.set_state(state)
    before, after = ray.get(shard.stats.remote()), restored.stats()
    for key in ("size", "inserted", "sampled"):
        assert before[key] == after[key]
    assert before["size"] == 50 and before["inserted"] == 70
    again = restored.get_state()
    np.testing.assert_array_equal(again["buffer"]["masses"], state["buffer"]["masses"])
    np.testing.assert_array_equal(again["buffer"]["data/id"], state["buffer"]["data/id"])
    # The generator state travels too, so the next draw is the same in both.
    np.testing.assert_array_equal(restored.sample(8).indices, ray.get(shard.sample.remote(8)).indices)


def test_a_dead_shard_is_named(make_shards):
    shards = make_shards(2, capacity=100, seed=0)
    from_items([step(0, 10), step(10, 10)]).for_each(StoreToReplay(shards, shard=0)).take(2)
    kill(shards.actors[1])
    with pytest.raises(ReplayShardError, match="replay shard 1"):
        from_items([step(20, 10)]).for_each(StoreToReplay(shards, shard=1)).take(1)


def test_a_shard_dead_at_a_save_is_restarted_from_the_last_checkpoint_and_saved(make_shards, tmp_path):
    shards = make_shards(2, capacity=100, seed=0, on_failure="restart")
    from_items([step(0, 10)]).for_each(StoreToReplay(shards, shard=0)).take(1)
    from_items([step(10, 6)]).for_each(StoreToReplay(shards, shard=1)).take(1)
    first = str(tmp_path / "first")
    os.makedirs(first)
    assert shards.save(first) == {"replay_shards": [{"size": 10, "capacity": 100}, {"size": 6, "capacity": 100}]}
    shards.saved_at(first)
    from_items([step(16, 4)]).for_each(StoreToReplay(shards, shard=1)).take(1)
    kill(shards.actors[1])
    second = str(tmp_path / "second")
    os.makedirs(second)
    # Shard 1's 4 items since the first checkpoint are lost with it; the save still succeeds.
    assert [s["size"] for s in shards.save(second)["replay_shards"]] == [10, 6]
    assert shards.num_restarts == 1
    assert shards.restored_sizes == {1: 6} and shards.restored_checkpoints == {1: first}


def _checkpoint(tmp_path, sizes: tuple[int, ...] = (10, 6)) -> tuple[str, list[np.ndarray]]:
    """The files of shards holding ``sizes`` items (ids 0..9, then 10..15 by default), as
    ``ReplayShards.save`` writes them (exported by local shards: no actor needed), and each shard's ids."""
    path = str(tmp_path / "ckpt")
    os.makedirs(path)
    local = [ReplayShard(capacity=100, seed=0) for _ in sizes]
    for i, (shard, n) in enumerate(zip(local, sizes)):
        shard.add(items(sum(sizes[:i]), n))
        open(os.path.join(path, f"replay_shard_{i}.npz"), "wb").write(shard.export_state())
    return path, [shard.get_state()["buffer"]["data/id"] for shard in local]


def test_a_shard_dead_during_a_load_is_restarted_with_the_checkpoints_contents(make_shards, tmp_path):
    path, expected = _checkpoint(tmp_path, sizes=(10,))
    shards = make_shards(1, capacity=100, seed=1, on_failure="restart")
    kill(shards.actors[0])  # dead as the restore starts: its import_state fails
    assert shards.load(path) == [10]
    assert shards.num_restarts == 1 and shards.restored_checkpoints == {0: path} and shards.restored_sizes == {0: 10}
    np.testing.assert_array_equal(shard_ids(shards)[0], expected[0])
    # Dead after the restore, the shard comes back with the checkpoint it was loaded from.
    kill(shards.actors[0])
    assert [s["size"] for s in shards.save(str(tmp_path))["replay_shards"]] == [10]
    assert shards.num_restarts == 2 and shards.restored_checkpoints == {0: path}


def test_a_shard_dead_during_a_load_without_restart_is_named_in_one_line(make_shards, tmp_path):
    path, _ = _checkpoint(tmp_path)
    shards = make_shards(2, capacity=100, seed=1)
    kill(shards.actors[0])
    with pytest.raises(ReplayShardError, match="replay shard 0 died while loading .*replay_shard_0.npz") as e:
        shards.load(path)
    assert "\n" not in str(e.value) and "on_worker_failure='restart'" in str(e.value)


STALL_S = 120.0
"""How long a :class:`StallingShard` waits, half loaded, for the kill: far longer than any test."""


class StallingShard(ReplayShard):
    """A shard whose first incarnation (generation 0) stops in the middle of ``import_state``:
    the buffer's contents are in, the counters and generator not yet, and it waits there to be
    killed. Its restarts (generation >= 1) load as any shard does."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._halfway = threading.Event()

    def import_state(self, data: bytes) -> int:
        if self.generation > 0:
            return super().import_state(data)
        with np.load(io.BytesIO(data), allow_pickle=False) as f:
            buffer = json.loads(f["__meta__"].tobytes().decode())["buffer"]
            buffer.update({k[len("buffer/") :]: f[k] for k in f.files if k.startswith("buffer/")})
        with self._cond:
            self._buffer.set_state(buffer)
        self._halfway.set()
        time.sleep(STALL_S)
        raise AssertionError(f"shard {self.index} was not killed while loading")

    def halfway(self) -> bool:
        """Whether a load has got halfway (asked while it waits: the actor is threaded)."""
        return self._halfway.is_set()


ship_module_by_value(sys.modules[__name__])  # the shard actors import StallingShard from this file's code


def load_killed_halfway(shards: ReplayShards, path: str) -> list[int]:
    """``shards.load(path)`` on a thread, shard 0 killed with ``ray.kill`` once its load is halfway."""
    with ThreadPoolExecutor(1) as pool:
        loading = pool.submit(shards.load, path)
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while not ray.get(shards.actors[0].halfway.remote(), timeout=KILL_TIMEOUT_S):
            assert time.monotonic() < deadline, "shard 0's load never got halfway"
            time.sleep(0.05)
        assert ray.get(shards.actors[0].stats.remote())["size"] > 0  # half loaded: contents in, counters not
        ray.kill(shards.actors[0], no_restart=True)
        return loading.result(timeout=2 * KILL_TIMEOUT_S)


def test_a_shard_killed_in_the_middle_of_its_load_is_restarted_with_the_checkpoints_contents(make_shards, tmp_path):
    path, expected = _checkpoint(tmp_path, sizes=(10,))
    saved = ReplayShard(capacity=100, seed=0)
    saved.import_state(read_bytes(os.path.join(path, "replay_shard_0.npz")))
    shards = make_shards(1, capacity=100, seed=1, on_failure="restart", shard_cls=StallingShard)
    half_loaded = shards.actors[0]
    assert load_killed_halfway(shards, path) == [10]
    assert shards.num_restarts == 1 and shards.restored_checkpoints == {0: path} and shards.restored_sizes == {0: 10}
    assert shards.actors[0] is not half_loaded and ray.get(shards.actors[0].ping.remote()) == 1  # a new incarnation
    [stats] = shards.stats()
    assert (stats["size"], stats["inserted"]) == (10, 10)
    np.testing.assert_array_equal(shard_ids(shards)[0], expected[0])
    state, want = ray.get(shards.actors[0].get_state.remote()), saved.get_state()
    np.testing.assert_array_equal(state["buffer"]["data/obs"][[0, 4, 9]], want["buffer"]["data/obs"][[0, 4, 9]])
    np.testing.assert_array_equal(state["buffer"]["masses"], want["buffer"]["masses"])
    assert state["rng"] == want["rng"]  # the generator too: the part the killed load never reached


def test_a_shard_killed_in_the_middle_of_its_load_without_restart_is_named_in_one_line(make_shards, tmp_path):
    path, _ = _checkpoint(tmp_path, sizes=(10,))
    shards = make_shards(1, capacity=100, seed=1, shard_cls=StallingShard)
    with pytest.raises(ReplayShardError, match="replay shard 0 died while loading .*replay_shard_0.npz") as e:
        load_killed_halfway(shards, path)
    assert "\n" not in str(e.value) and "on_worker_failure='restart'" in str(e.value)


def test_replay_files_that_do_not_fit_the_run_are_refused_in_one_line(tmp_path):
    """What ``ReplayShards.load`` checks first, before any shard takes the files."""
    path, _ = _checkpoint(tmp_path)
    check_fits(path, 2, 100)
    with pytest.raises(ConfigError, match="shard of capacity 100, this run's shards hold 50"):
        check_fits(path, 2, 50)
    with pytest.raises(ConfigError, match="No replay contents for 1 of 3 shards"):
        check_fits(path, 3, 100)
    with pytest.raises(ConfigError, match="more replay shards than this run's 1"):
        check_fits(path, 1, 100)


def test_a_multiagent_record_is_checked_per_policy_directory(tmp_path):
    """``{"replay_<policy>": [...]}``: each policy's shards against its own list."""
    path, _ = _checkpoint(tmp_path)
    os.rename(path, str(tmp_path / "replay_p0"))
    record = {"replay_p0": [{"size": 10, "capacity": 100}, {"size": 6, "capacity": 100}]}
    check_record(str(tmp_path), record)
    with pytest.raises(
        ConfigError, match=r"replay_p0/replay_shard_1\.npz holds 6 items of capacity 100, replay_shards says 7"
    ):
        check_record(str(tmp_path), {"replay_p0": [{"size": 10, "capacity": 100}, {"size": 7, "capacity": 100}]})
    with pytest.raises(ConfigError, match=r"replay_shards names '\.\./x', which is no replay_<policy> directory"):
        check_record(str(tmp_path), {"../x": []})
