"""jaxflow.replay: the prioritized buffer's sampling distribution and importance weights
against formulas computed here, state round-trips, batched updates, ring eviction, validation."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from scipy import stats

from jaxflow.replay import buffer as replay
from jaxflow.replay.buffer import PrioritizedReplayBuffer
from jaxflow.replay.sum_tree import SumTree


def known_priorities(n=1000, num_zero=50, seed=0):
    """Log-uniform priorities in (1e-3, 10] with ``num_zero`` of them exactly 0."""
    rng = np.random.default_rng(seed)
    p = 10.0 ** rng.uniform(-3.0, 1.0, size=n)
    p = np.clip(p, np.nextafter(1e-3, 1.0), 10.0)
    p[rng.choice(n, num_zero, replace=False)] = 0.0
    return p


def filled_buffer(priorities, alpha):
    n = len(priorities)
    buffer = PrioritizedReplayBuffer(capacity=n, alpha=alpha)
    buffer.add({"id": np.arange(n)}, priorities)
    return buffer


def draw_counts(buffer, rng, draws, batch_size=1000, beta=0.4):
    counts = np.zeros(len(buffer), np.int64)
    for _ in range(draws // batch_size):
        batch, indices, _ = buffer.sample(batch_size, rng, beta)
        np.testing.assert_array_equal(batch["id"], indices)
        counts += np.bincount(indices, minlength=len(buffer))
    return counts


def assert_states_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        assert np.asarray(a[k]).dtype == np.asarray(b[k]).dtype, k


def test_draws_follow_priorities_to_the_alpha():
    p = known_priorities()
    alpha = 0.6
    buffer = filled_buffer(p, alpha)
    counts = draw_counts(buffer, np.random.default_rng(1), draws=1_000_000)
    positive = p > 0
    assert counts[~positive].sum() == 0
    expected = p[positive] ** alpha / np.sum(p[positive] ** alpha)
    assert expected.min() * 1_000_000 > 5  # chi-square's usual validity condition
    # Goodness of fit at the 0.1% level over 950 cells; a sampler off by a few percent fails surely.
    assert stats.chisquare(counts[positive], 1_000_000 * expected).pvalue > 1e-3
    assert counts.sum() == 1_000_000


def test_alpha_zero_samples_uniformly_among_positive_priorities():
    p = known_priorities(num_zero=0, seed=2)
    buffer = filled_buffer(p, alpha=0.0)
    counts = draw_counts(buffer, np.random.default_rng(3), draws=200_000)
    assert stats.chisquare(counts).pvalue > 1e-3  # expected: 200 per item
    # A zero priority stays undrawable even though 0.0 ** 0 == 1.
    p[:10] = 0.0
    counts = draw_counts(filled_buffer(p, alpha=0.0), np.random.default_rng(3), draws=100_000)
    assert counts[:10].sum() == 0 and counts[10:].min() > 0


def test_alpha_zero_draws_uniformly_when_most_rows_have_priority_zero():
    # 3 drawable rows in 3,000: the redraws rarely find them, so the sum-tree draws the rest.
    p = np.zeros(3000)
    p[[7, 1500, 2999]] = [0.1, 5.0, 1.0]
    buffer = filled_buffer(p, alpha=0.0)
    _, indices, weights = buffer.sample(30_000, np.random.default_rng(5), beta=0.4)
    counts = np.bincount(indices, minlength=len(p))
    assert counts.sum() == 30_000 and counts[p > 0].sum() == 30_000
    assert stats.chisquare(counts[p > 0]).pvalue > 1e-3  # 10,000 each
    np.testing.assert_array_equal(weights, np.ones(30_000, np.float32))


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_importance_weights_match_the_formula(beta):
    p = known_priorities()
    alpha = 0.6
    buffer = filled_buffer(p, alpha)
    _, indices, weights = buffer.sample(4096, np.random.default_rng(4), beta)
    n = len(p)
    prob = np.where(p > 0, p, 0.0) ** alpha / np.sum(p**alpha)
    w_all = (n * prob[p > 0]) ** -beta
    expected = (n * prob[indices]) ** -beta / w_all.max()
    assert weights.dtype == np.float32
    np.testing.assert_allclose(weights, expected, rtol=0, atol=1e-6)
    assert np.all(weights > 0) and np.all(weights <= 1)
    if beta == 0.0:
        np.testing.assert_array_equal(weights, np.ones_like(weights))
    # The normalizer is the least likely positive item's weight, here ~0.016^-beta / 4^-beta.
    assert buffer.tree.min == pytest.approx(np.min(p[p > 0]) ** alpha, rel=1e-12)


def test_zero_priority_never_drawn_at_float_edges():
    # Zero mass at both ends and between tiny and huge masses: draws near the total, or at a
    # boundary after rounding, must still land on a positive item.
    p = np.zeros(64)
    p[[1, 30, 31, 40]] = [1e-300, 1.0, 1e12, 3e-8]
    buffer = filled_buffer(p, alpha=1.0)
    counts = draw_counts(buffer, np.random.default_rng(5), draws=100_000)
    assert set(np.flatnonzero(counts)) <= {1, 30, 31, 40}
    _, _, weights = buffer.sample(1000, np.random.default_rng(5), beta=1.0)
    assert np.all(weights > 0) and np.all(weights <= 1)  # mass ratios up to 1e312: no overflow to 0
    tree = buffer.tree
    edges = np.array([0.0, np.nextafter(tree.total, 0.0), tree.total, 1e12, 1e12 + 1.0, 1.0])
    found = tree.find(edges)
    assert np.all(p[found] > 0), found


def test_state_round_trip_gives_identical_samples_after_wrap_around():
    rng = np.random.default_rng(6)
    capacity, alpha = 100, 0.7
    buffer = PrioritizedReplayBuffer(capacity, alpha)
    for _ in range(5):  # 5 * 47 items: the ring wraps twice
        obs = rng.integers(0, 256, size=(47, 3, 2), dtype=np.uint8)
        buffer.add({"obs": obs, "reward": rng.normal(size=47).astype(np.float32)}, rng.uniform(0.01, 5, 47))
    buffer.update_priorities(rng.integers(0, capacity, 30), rng.uniform(0, 5, 30))
    buffer.add({"obs": np.zeros((3, 3, 2), np.uint8), "reward": np.ones(3, np.float32)})  # at max priority
    assert len(buffer) == capacity

    restored = PrioritizedReplayBuffer(capacity, alpha)
    restored.set_state(buffer.get_state())
    assert_states_equal(restored.get_state(), buffer.get_state())
    assert restored.tree.total == buffer.tree.total and restored.tree.min == buffer.tree.min

    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    for step in range(20):
        batch_a, idx_a, w_a = buffer.sample(32, rng_a, beta=0.5)
        batch_b, idx_b, w_b = restored.sample(32, rng_b, beta=0.5)
        np.testing.assert_array_equal(idx_a, idx_b)
        np.testing.assert_array_equal(w_a, w_b)
        assert_states_equal(batch_a, batch_b)
        new_p = np.abs(batch_a["reward"]).astype(np.float64) + 0.01
        buffer.update_priorities(idx_a, new_p)
        restored.update_priorities(idx_b, new_p)
        if step % 5 == 0:  # keep adding, so the ring position must have been restored too
            more = {"obs": np.full((7, 3, 2), step, np.uint8), "reward": np.full(7, step, np.float32)}
            np.testing.assert_array_equal(buffer.add(more), restored.add(more))
    assert_states_equal(restored.get_state(), buffer.get_state())


def test_state_round_trip_before_wrap_and_empty():
    buffer = PrioritizedReplayBuffer(50, 0.6)
    fresh = PrioritizedReplayBuffer(50, 0.6)
    fresh.set_state(buffer.get_state())
    assert len(fresh) == 0 and fresh.nbytes == buffer.nbytes
    buffer.add({"x": np.arange(10, dtype=np.int16)}, np.linspace(0.5, 2, 10))
    fresh.set_state(buffer.get_state())
    assert len(fresh) == 10 and fresh.get_state()["data/x"].dtype == np.int16
    assert fresh.max_priority == 2.0
    with pytest.raises(ValueError, match="capacity 50, alpha 0.6"):
        PrioritizedReplayBuffer(60, 0.6).set_state(buffer.get_state())


def test_batched_priority_updates_equal_sequential_ones():
    rng = np.random.default_rng(8)
    n = 300
    batched, sequential = (filled_buffer(rng.uniform(0.1, 3, n), alpha=0.6) for _ in range(2))
    sequential.set_state(batched.get_state())
    indices = rng.integers(0, n, 2000)  # ~2000 writes to 300 slots: many repeats
    priorities = rng.uniform(0, 8, 2000)
    priorities[::17] = 0.0
    batched.update_priorities(indices, priorities)
    for i, q in zip(indices, priorities):
        sequential.update_priorities(np.array([i]), np.array([q]))

    last = {}
    for i, q in zip(indices, priorities):
        last[int(i)] = q
    expected_p = batched.get_state()["masses"].copy()
    # Leaves never written keep their masses; written ones hold their last priority ** alpha.
    for i, q in last.items():
        expected_p[i] = q**0.6
    prob_batched = batched.tree.leaves / batched.tree.total
    prob_sequential = sequential.tree.leaves / sequential.tree.total
    np.testing.assert_allclose(prob_batched, expected_p / expected_p.sum(), rtol=1e-12)
    np.testing.assert_array_equal(prob_batched, prob_sequential)
    assert batched.tree.total == sequential.tree.total
    assert batched.tree.total == pytest.approx(expected_p.sum(), rel=1e-12)
    assert batched.max_priority == sequential.max_priority == pytest.approx(priorities.max())
    assert_states_equal(batched.get_state(), sequential.get_state())


def test_sum_tree_matches_numpy_after_random_updates():
    rng = np.random.default_rng(9)
    tree = SumTree(1000)
    reference = np.zeros(1000)
    for _ in range(50):
        idx = rng.integers(0, 1000, 64)
        val = rng.uniform(0, 1, 64) * (rng.uniform(size=64) > 0.2)
        tree.update(idx, val)
        for i, v in zip(idx, val):
            reference[i] = v
    np.testing.assert_array_equal(tree.leaves, reference)
    assert tree.total == pytest.approx(reference.sum(), rel=1e-12)
    assert tree.min == reference[reference > 0].min()
    # find() inverts the running sum: each leaf's own left edge maps to it.
    positive = np.flatnonzero(reference > 0)
    left_edges = np.concatenate(([0.0], np.cumsum(reference)))[positive]
    np.testing.assert_array_equal(tree.find(left_edges + 1e-12), positive)


def test_ring_evicts_the_oldest_items():
    capacity, k = 10, 3
    buffer = PrioritizedReplayBuffer(capacity, alpha=0.6)
    np.testing.assert_array_equal(buffer.add({"id": np.arange(8)}), np.arange(8))
    np.testing.assert_array_equal(buffer.add({"id": np.arange(8, capacity + k)}), [8, 9, 0, 1, 2])
    assert len(buffer) == capacity
    stored = buffer.get_state()["data/id"]
    assert sorted(stored) == list(range(k, capacity + k))
    np.testing.assert_array_equal(stored, [10, 11, 12, 3, 4, 5, 6, 7, 8, 9])
    batch, _, _ = buffer.sample(5000, np.random.default_rng(10), beta=0.4)
    assert batch["id"].min() >= k and set(batch["id"]) == set(range(k, capacity + k))

    # A batch longer than the ring keeps its last `capacity` items, as one-by-one adds would.
    one_by_one = PrioritizedReplayBuffer(capacity, alpha=0.6)
    for i in range(25):
        one_by_one.add({"id": np.array([i])}, np.array([i + 1.0]))
    at_once = PrioritizedReplayBuffer(capacity, alpha=0.6)
    at_once.add({"id": np.arange(25)}, np.arange(1.0, 26.0))
    assert_states_equal(at_once.get_state(), one_by_one.get_state())
    assert sorted(at_once.get_state()["data/id"]) == list(range(15, 25))


def test_new_items_get_the_max_priority_seen():
    buffer = PrioritizedReplayBuffer(10, alpha=0.5)
    buffer.add({"x": np.zeros(2)})
    np.testing.assert_array_equal(buffer.tree.leaves[:2], [1.0, 1.0])
    buffer.add({"x": np.zeros(1)}, np.array([4.0]))
    buffer.update_priorities(np.array([0]), np.array([9.0]))
    buffer.update_priorities(np.array([0]), np.array([0.25]))  # the max seen stays 9
    buffer.add({"x": np.zeros(1)})
    np.testing.assert_allclose(buffer.tree.leaves[:4], [0.5, 1.0, 2.0, 3.0])
    assert buffer.max_priority == 9.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -1e-9])
def test_invalid_priorities_raise_and_change_nothing(bad):
    rng = np.random.default_rng(11)
    buffer = PrioritizedReplayBuffer(20, alpha=0.6)
    buffer.add({"obs": rng.integers(0, 255, (15, 2), dtype=np.uint8)}, rng.uniform(0.1, 2, 15))
    before = buffer.get_state()

    p = np.full(8, 0.5)
    p[[2, 5]] = bad
    with pytest.raises(ValueError, match=r"2 of 8 are not \(first at position 2: "):
        buffer.add({"obs": np.ones((8, 2), np.uint8)}, p)
    assert_states_equal(buffer.get_state(), before)

    with pytest.raises(ValueError, match=r"2 of 8 are not"):
        buffer.update_priorities(np.arange(8), p)
    assert_states_equal(buffer.get_state(), before)


@pytest.mark.parametrize(
    "batch, priorities, message",
    [
        ({"obs": np.ones((3, 2), np.uint8), "extra": np.ones(3)}, None, r"unexpected \['extra'\]"),
        ({"other": np.ones((3, 2), np.uint8)}, None, r"missing \['obs'\]"),
        ({"obs": np.ones((3, 4), np.uint8)}, None, "item shape"),
        ({"obs": np.ones((3, 2), np.float32)}, None, "cannot be stored as uint8"),
        ({"obs": np.ones((3, 2), np.uint8)}, np.ones(4), r"Expected 3 priorities"),
        ({}, None, "at least one field"),
    ],
)
def test_mismatched_batches_raise_and_change_nothing(batch, priorities, message):
    buffer = PrioritizedReplayBuffer(20, alpha=0.6)
    buffer.add({"obs": np.zeros((5, 2), np.uint8)})
    before = buffer.get_state()
    with pytest.raises(ValueError, match=message):
        buffer.add(batch, priorities)
    assert_states_equal(buffer.get_state(), before)


def test_unequal_leading_sizes_raise_before_anything_is_stored():
    buffer = PrioritizedReplayBuffer(20, alpha=0.6)
    with pytest.raises(ValueError, match="different leading sizes"):
        buffer.add({"obs": np.zeros((5, 2), np.uint8), "reward": np.zeros(4, np.float32)})
    assert len(buffer) == 0 and buffer.bytes_per_transition == 0
    buffer.add({"obs": np.zeros((5, 2), np.uint8), "reward": np.zeros(5, np.float32)})
    before = buffer.get_state()
    with pytest.raises(ValueError, match="different leading sizes"):
        buffer.add({"obs": np.zeros((5, 2), np.uint8), "reward": np.zeros(6, np.float32)})
    assert_states_equal(buffer.get_state(), before)


def test_update_rejects_slots_not_stored():
    buffer = PrioritizedReplayBuffer(20, alpha=0.6)
    buffer.add({"x": np.zeros(5)})
    before = buffer.get_state()
    with pytest.raises(IndexError, match="outside the 5 stored items"):
        buffer.update_priorities(np.array([0, 5]), np.array([1.0, 1.0]))
    assert_states_equal(buffer.get_state(), before)


def test_sampling_needs_positive_mass():
    buffer = PrioritizedReplayBuffer(4, alpha=0.6)
    with pytest.raises(ValueError, match="positive priority"):
        buffer.sample(1, np.random.default_rng(0), beta=0.4)
    buffer.add({"x": np.zeros(2)}, np.zeros(2))
    with pytest.raises(ValueError, match="none of the 2 stored items"):
        buffer.sample(1, np.random.default_rng(0), beta=0.4)


def test_uint8_fields_stay_uint8_and_bytes_are_counted():
    capacity = 64
    buffer = PrioritizedReplayBuffer(capacity, alpha=0.6)
    batch = {
        "obs": np.random.default_rng(12).integers(0, 256, (10, 84, 84, 4), dtype=np.uint8),
        "action": np.zeros(10, np.int32),
        "reward": np.zeros(10, np.float32),
        "done": np.zeros(10, bool),
    }
    buffer.add(batch)
    per_item = 84 * 84 * 4 * 1 + 4 + 4 + 1
    assert buffer.bytes_per_transition == per_item
    assert buffer.nbytes == capacity * per_item + buffer.tree.nbytes
    sampled, indices, _ = buffer.sample(16, np.random.default_rng(13), beta=0.4)
    assert sampled["obs"].dtype == np.uint8 and sampled["obs"].shape == (16, 84, 84, 4)
    assert sampled["done"].dtype == np.bool_
    np.testing.assert_array_equal(sampled["obs"], batch["obs"][indices])
    assert buffer.get_state()["data/obs"].dtype == np.uint8


def test_docstring_example_runs():
    assert doctest.testmod(replay, raise_on_error=True).attempted > 0
