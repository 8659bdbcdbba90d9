"""The on-device prioritized replay buffer: ring writes, the sampling distribution, importance weights."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxflow.replay import on_device as device_replay


def _filled(n: int, capacity: int, priorities: np.ndarray, alpha: float = 1.0) -> device_replay.DeviceReplayState:
    state = device_replay.init({"x": jnp.zeros((2,), jnp.float32), "a": jnp.zeros((), jnp.int32)}, capacity)
    items = {"x": jnp.arange(2 * n, dtype=jnp.float32).reshape(n, 2), "a": jnp.arange(n, dtype=jnp.int32)}
    return device_replay.add(state, items, jnp.asarray(priorities, jnp.float32), alpha)


def test_add_writes_a_ring_and_overwrites_the_oldest():
    state = _filled(5, 8, np.ones(5))
    state = device_replay.add(
        state, {"x": jnp.full((5, 2), -1.0), "a": jnp.full((5,), 99, jnp.int32)}, jnp.full((5,), 2.0), 1.0
    )
    assert int(state.size) == 8 and int(state.position) == 2
    np.testing.assert_array_equal(np.asarray(state.data["a"]), [99, 99, 2, 3, 4, 99, 99, 99])
    np.testing.assert_allclose(np.asarray(state.priorities), [2, 2, 1, 1, 1, 2, 2, 2])


def test_sampling_follows_priorities_to_the_power_alpha():
    """Chi-square over 200k draws of 6 items with priorities 1..6 and alpha 0.6; the empty
    slots (capacity 10) are never drawn. At this sample size a wrong exponent (0.5 or 0.7)
    fails the test by a wide margin, checked below."""
    priorities = np.arange(1.0, 7.0)
    state = _filled(6, 10, priorities, alpha=0.6)
    draw = jax.jit(lambda key: device_replay.sample(state, key, 1000, 0.4)[1])
    slots = np.concatenate([np.asarray(draw(k)) for k in jax.random.split(jax.random.PRNGKey(0), 200)])
    counts = np.bincount(slots, minlength=10)
    assert counts[6:].sum() == 0
    for alpha, should_pass in ((0.6, True), (0.5, False), (0.7, False)):
        expected = priorities**alpha / (priorities**alpha).sum() * len(slots)
        p = stats.chisquare(counts[:6], expected).pvalue
        assert (p > 1e-3) == should_pass, (alpha, p)


def test_importance_weights_are_normalised_by_the_smallest_priority():
    priorities = np.array([1.0, 4.0, 9.0])
    state = _filled(3, 3, priorities, alpha=1.0)
    _, slots, weights = device_replay.sample(state, jax.random.PRNGKey(1), 64, 0.5)
    # (N P(i))^-beta / max_j (N P(j))^-beta = (p_i / p_min)^-beta
    np.testing.assert_allclose(np.asarray(weights), (priorities[np.asarray(slots)] / 1.0) ** -0.5, rtol=1e-6)
    assert np.all(np.asarray(weights) <= 1.0) and np.all(np.asarray(weights) > 0)


def test_updated_priorities_change_what_is_drawn():
    state = _filled(4, 4, np.ones(4))
    state = device_replay.update_priorities(state, jnp.array([0, 1, 2]), jnp.zeros(3), 1.0)
    batch, slots, _ = device_replay.sample(state, jax.random.PRNGKey(2), 32, 1.0)
    assert set(np.asarray(slots).tolist()) == {3}
    np.testing.assert_array_equal(np.asarray(batch["x"]), np.tile([[6.0, 7.0]], (32, 1)))


def test_more_items_than_capacity_fail_clearly():
    with pytest.raises(ValueError, match="capacity 4"):
        _filled(5, 4, np.ones(5))


def test_a_slot_without_priority_is_never_drawn_though_the_cdf_gives_it_a_sliver():
    """XLA's cumsum rounds each prefix on its own, so among 12,800 float32 priorities, 30% of
    them 0 (a sequence replay's overwritten slots), some zero slots own a sliver of the CDF.
    Positions at the start of those slivers land on them by the CDF itself; ``slots_at`` draws
    the nearest slot before each that has mass, so every weight ``(p / p_min)^-beta`` is finite."""
    rng = np.random.default_rng(0)
    priorities = rng.gamma(1.0, 1.0, 12_800).astype(np.float32)
    priorities[rng.random(12_800) < 0.3] = 0.0
    p = jnp.asarray(priorities)
    cdf = jax.jit(jnp.cumsum)(p)
    u = cdf[:-1]  # each slot's CDF value: a draw there goes to the first slot past it
    by_cdf = np.asarray(jnp.searchsorted(cdf, u, side="right"))
    sliver = priorities[np.minimum(by_cdf, len(priorities) - 1)] == 0
    assert sliver.sum() >= 10  # the round-off this guards against is there (57 slivers here)
    slots = np.asarray(jax.jit(device_replay.slots_at)(p, u[sliver]))
    assert np.all(priorities[slots] > 0)
    for drawn, got in zip(by_cdf[sliver], slots):
        assert got == np.flatnonzero(priorities[:drawn] > 0)[-1]  # the nearest slot before with mass
    state = device_replay.DeviceReplayState({"x": jnp.zeros(12_800)}, p, jnp.int32(0), jnp.int32(12_800))
    for key in jax.random.split(jax.random.PRNGKey(3), 20):
        _, slots, weights = device_replay.sample(state, key, 512, 0.6)
        assert np.all(priorities[np.asarray(slots)] > 0) and np.all(np.isfinite(np.asarray(weights)))
