"""Semantics of jaxflow.dataflow: local operators, union/Concurrently, duplicate's
bounded buffering, and the parallel gathers over real Ray actors."""

from __future__ import annotations

import gc
import itertools
import os
import threading
import time

import pytest
import ray

from jaxflow.dataflow.actors import from_actors
from jaxflow.dataflow.concurrency import Concurrently
from jaxflow.dataflow.iterators import BackpressureError, from_items, from_iterator

# ray.init starts its daemons with fork+exec; the child runs no JAX code, so
# JAX's fork warning does not apply.
pytestmark = pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning")


class CountingSource:
    """An endless (or bounded) source that records how many items it has produced."""

    def __init__(self, limit: int | None = None):
        self.produced = 0
        self.limit = limit

    def gen(self):
        for i in itertools.count() if self.limit is None else range(self.limit):
            self.produced += 1
            yield i

    def iterator(self):
        return from_iterator(self.gen)


# ---------------------------------------------------------------- local operators


def test_for_each_filter_take():
    it = from_items(range(10)).for_each(lambda x: x * 10).filter(lambda x: x % 20 == 0)
    assert it.take(3) == [0, 20, 40]
    assert it.take(2) == [60, 80]  # take continues where it stopped
    with pytest.raises(StopIteration):
        next(it)


def test_combine_flattens_lists_including_empty_ones():
    it = from_items([1, 2, 3, 4]).combine(lambda x: [x] * (x % 3))  # 1 -> [1], 2 -> [2, 2], 3 -> []
    assert list(it) == [1, 2, 2, 4]


def test_batch_and_flatten():
    assert list(from_items(range(7)).batch(3)) == [[0, 1, 2], [3, 4, 5]]  # a partial batch is not emitted
    assert list(from_items(range(7)).batch(3).flatten()) == [0, 1, 2, 3, 4, 5]


def test_iterators_are_lazy():
    src = CountingSource()
    it = src.iterator().for_each(lambda x: x + 1)
    assert src.produced == 0
    assert it.take(3) == [1, 2, 3]
    assert src.produced == 3


# ---------------------------------------------------------------- union / Concurrently


def test_union_round_robin_order():
    a, b = from_items([1, 2, 3, 4]), from_items(["x", "y"])
    # An exhausted op drops out; the others go on.
    assert list(a.union(b)) == [1, "x", 2, "y", 3, 4]


def test_round_robin_weights():
    a = from_items([f"a{i}" for i in range(6)])
    b = from_items([f"b{i}" for i in range(6)])
    out = Concurrently([a, b], round_robin_weights=[2, 1]).take(9)
    assert out == ["a0", "a1", "b0", "a2", "a3", "b1", "a4", "a5", "b2"]


def test_union_weights_keyword():
    a, b = from_items("abcdef"), from_items("XYZ")
    # The empty first op drops out at once; then 3 of a and 1 of b per round.
    assert from_items([]).union(a, b, weights=[1, 3, 1]).take(7) == ["a", "b", "c", "X", "d", "e", "f"]


def test_output_indexes_drop_outputs_but_still_consume():
    src = CountingSource(limit=10)
    side_effects = []
    a = from_items([f"a{i}" for i in range(4)])
    b = src.iterator().for_each(lambda x: side_effects.append(x) or x)
    out = list(Concurrently([a, b], output_indexes=[0]))
    assert out == ["a0", "a1", "a2", "a3"]
    # b ran to the end although none of its items were yielded.
    assert src.produced == 10 and side_effects == list(range(10))


def test_star_weight_pulls_an_op_until_it_is_exhausted():
    a, b = from_items([1, 2, 3]), from_items(["x", "y"])
    assert list(Concurrently([a, b], round_robin_weights=["*", 1])) == [1, 2, 3, "x", "y"]


def test_star_weight_pulls_until_not_ready():
    # b0 with "*" pulls until its sibling's buffer holds max_buffer=3 items; b1 then
    # takes one, freeing one slot. So b0 stays exactly 3 items ahead of b1.
    b0, b1 = from_items(range(10)).duplicate(2, max_buffer=3)
    out = list(
        Concurrently([b0.for_each(lambda x: ("a", x)), b1.for_each(lambda x: ("b", x))], round_robin_weights=["*", 1])
    )
    expected = [("a", 0), ("a", 1), ("a", 2), ("b", 0)]
    for i in range(3, 10):
        expected += [("a", i), ("b", i - 2)]
    expected += [("b", 8), ("b", 9)]
    assert out == expected


def test_concurrently_rejects_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        Concurrently([from_items([1])], mode="parallel")
    with pytest.raises(ValueError, match="one weight per op"):
        Concurrently([from_items([1]), from_items([2])], round_robin_weights=[1])


def test_concurrently_merges_contexts():
    a, b = from_items([1]), from_items([2])
    a.context.counters["n"] = 1
    b.context.counters["n"] = 2
    merged = Concurrently([a, b])
    assert merged.context.counters["n"] == 3
    assert a.context is b.context is merged.context


# ---------------------------------------------------------------- duplicate


def test_duplicate_backpressure_raises_instead_of_buffering():
    src = CountingSource()
    b0, b1 = src.iterator().duplicate(2, max_buffer=4)
    assert b0.take(4) == [0, 1, 2, 3]
    with pytest.raises(BackpressureError, match="duplicate"):
        next(b0)
    # The refused pull did not read the source: b1's buffer holds exactly 4 items.
    assert src.produced == 4
    assert b1.take(6) == [0, 1, 2, 3, 4, 5]  # b1 catches up, then reads the source itself
    assert src.produced == 6
    # b0 drains the 2 items b1 read for it, then may again run 4 ahead of b1.
    assert b0.take(6) == [4, 5, 6, 7, 8, 9]
    with pytest.raises(BackpressureError):
        next(b0)
    assert src.produced == 10


def test_duplicate_in_round_robin_every_branch_sees_every_item():
    b0, b1 = from_items(range(20)).duplicate(2, max_buffer=2)
    out = list(Concurrently([b0.for_each(lambda x: ("a", x)), b1.for_each(lambda x: ("b", x))]))
    assert [x for tag, x in out if tag == "a"] == list(range(20))
    assert [x for tag, x in out if tag == "b"] == list(range(20))
    assert out[:4] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]


@pytest.mark.parametrize("k", [1, 3])
def test_duplicate_buffer_never_exceeds_max_buffer(k):
    src = CountingSource(limit=50)
    consumed = [0, 0]
    worst = [0, 0]

    def seen(branch):
        def fn(x):
            assert x == consumed[branch]  # in order, nothing skipped
            consumed[branch] += 1
            # What the source produced but a branch has not consumed yet is that branch's buffer.
            for j in (0, 1):
                worst[j] = max(worst[j], src.produced - consumed[j])
            return x

        return fn

    b0, b1 = src.iterator().duplicate(2, max_buffer=k)
    # Uneven weights: branch 0 tries to pull 5 items per round, branch 1 only one.
    out = list(Concurrently([b0.for_each(seen(0)), b1.for_each(seen(1))], round_robin_weights=[5, 1]))
    assert consumed == [50, 50] and len(out) == 100
    # b1's buffer filled to exactly k (b0 was held there, not merely below it);
    # b0's never grew past k either.
    assert worst[1] == k
    assert worst[0] <= k


# ---------------------------------------------------------------- async mode


def test_async_yields_every_item_of_every_op():
    a, b, c = from_items(range(50)), from_items(range(100, 130)), from_items([])
    out = list(Concurrently([a, b, c], mode="async"))
    assert sorted(out) == list(range(50)) + list(range(100, 130))
    # Each op's own order survives the interleaving.
    assert [x for x in out if x < 100] == list(range(50))
    assert [x for x in out if x >= 100] == list(range(100, 130))


def test_async_output_indexes():
    a, b = from_items(range(5)), from_items(range(100, 105))
    assert sorted(Concurrently([a, b], mode="async", output_indexes=[1])) == list(range(100, 105))


def test_async_exception_in_one_op_reaches_the_consumer():
    def boom(x):
        if x == 5:
            raise KeyError("op 1 failed at item 5")
        return x

    a = from_iterator(lambda: iter(range(10**6)))
    b = from_items(range(10)).for_each(boom)
    it = Concurrently([a, b], mode="async")
    with pytest.raises(KeyError, match="op 1 failed at item 5"):
        for _ in range(10**6 + 20):
            next(it)


def test_async_duplicate_branches_both_complete():
    # The async consumer must wait out NOT_READY rather than drop items or raise.
    b0, b1 = from_items(range(40)).duplicate(2, max_buffer=2)
    out = list(Concurrently([b0.for_each(lambda x: ("a", x)), b1.for_each(lambda x: ("b", x))], mode="async"))
    assert [x for t, x in out if t == "a"] == list(range(40))
    assert [x for t, x in out if t == "b"] == list(range(40))


# ---------------------------------------------------------------- Ray actors


@ray.remote(num_cpus=0, max_concurrency=8)
class Producer:
    """Returns (actor_id, seq) per call and records how many calls ran at once."""

    def __init__(self, actor_id: int, delay_s: float):
        self.actor_id, self.delay_s = actor_id, delay_s
        self.lock = threading.Lock()
        self.seq = 0
        self.running = 0
        self.max_running = 0

    def item(self):
        with self.lock:
            seq = self.seq
            self.seq += 1
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            time.sleep(self.delay_s)
        finally:
            with self.lock:
                self.running -= 1
        return (self.actor_id, seq)

    def stats(self):
        with self.lock:
            return {"calls": self.seq, "max_running": self.max_running}

    def run_chain(self, method, fns):
        item = getattr(self, method)()
        for f in fns:
            item = f(item)
        return item


def make_producers(delays):
    actors = [Producer.remote(i, d) for i, d in enumerate(delays)]
    ray.get([a.stats.remote() for a in actors])  # started
    return actors


@pytest.mark.parametrize("num_async", [1, 3])
def test_gather_async_bounds_requests_in_flight(ray_local, num_async):
    actors = make_producers([0.05, 0.05])
    it = from_actors(actors, "item").gather_async(num_async=num_async)
    items = []
    for _ in range(30):
        items.append(next(it))
        # The gather records which actor produced the item being handed out.
        assert it.context.current_actor[0] == items[-1][0]
    stats = ray.get([a.stats.remote() for a in actors])
    for actor_id, s in enumerate(stats):
        seqs = [seq for a, seq in items if a == actor_id]
        assert len(seqs) == len(set(seqs))
        assert s["max_running"] <= num_async
        # Never more calls sent than taken plus those still in flight.
        assert s["calls"] <= len(seqs) + num_async
    assert {a for a, _ in items} == {0, 1}
    # With 30 items and 50 ms calls every actor reaches the bound, not merely respects it.
    assert [s["max_running"] for s in stats] == [num_async, num_async]
    for a in actors:
        ray.kill(a)


def test_gather_async_rejects_zero():
    with pytest.raises(ValueError, match="num_async must be >= 1"):
        from_actors([], "item").gather_async(num_async=0)


def test_gather_sync_is_in_actor_order_per_round(ray_local):
    # Actor 0 is the slow one, so completion order would put actor 1 first.
    actors = make_producers([0.05, 0.0, 0.01])
    items = from_actors(actors, "item").gather_sync().take(12)
    assert items == [(a, r) for r in range(4) for a in range(3)]
    # Round by round: no actor got a request beyond the rounds that were pulled.
    stats = ray.get([a.stats.remote() for a in actors])
    assert [s["calls"] for s in stats] == [4, 4, 4]
    for a in actors:
        ray.kill(a)


def test_batch_across_shards_returns_one_list_per_round(ray_local):
    actors = make_producers([0.0, 0.0])
    rounds = from_actors(actors, "item").batch_across_shards().take(2)
    assert rounds == [[(0, 0), (1, 0)], [(0, 1), (1, 1)]]
    for a in actors:
        ray.kill(a)


def test_par_for_each_runs_on_the_actor_side_in_order(ray_local):
    actors = make_producers([0.0, 0.0])
    driver_pid = os.getpid()
    it = (
        from_actors(actors, "item")
        .par_for_each(lambda t: t + (os.getpid(),))
        .par_for_each(lambda t: t + ("second",))
        .gather_sync()
    )
    items = it.take(4)
    assert [(a, s) for a, s, _, _ in items] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert all(tag == "second" for *_, tag in items)  # fns applied in the order given
    pids = {a: pid for a, _, pid, _ in items}
    assert driver_pid not in pids.values()  # the functions ran in the actor processes
    assert pids[0] != pids[1]
    for a in actors:
        ray.kill(a)


def test_async_producers_stop_when_the_consumer_goes_away():
    it = Concurrently([from_items(itertools.count())], mode="async")
    assert next(it) == 0
    it._gen.close()  # what garbage collection of an abandoned iterator does
    del it
    gc.collect()
    deadline = time.monotonic() + 5
    while any(t.name.startswith("Concurrently[") and t.is_alive() for t in threading.enumerate()):
        assert time.monotonic() < deadline, "producer thread still blocked on a full queue"
        time.sleep(0.05)
