"""HostPostprocess against ``jax.jit`` of the same postprocess: the same fields, values and
dtypes, with the fields a postprocess only passes through returned as the caller's own
arrays (no copy), for every algorithm that postprocesses on its workers."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow import get_algorithm
from jaxflow.rollout.postprocess import HostPostprocess

T, B, A = 6, 3, 4


def fragment(rng: np.random.Generator, obs_shape: tuple[int, ...] = (4, 84, 84)) -> dict[str, np.ndarray]:
    """A fragment as ``RolloutWorker.sample`` makes it, with episode ends and time limits."""
    return dict(
        obs=rng.integers(0, 256, (T, B) + obs_shape, dtype=np.uint8),
        actions=rng.integers(0, A, (T, B)).astype(np.int32),
        logp=rng.normal(size=(T, B)).astype(np.float32),
        dist_inputs=rng.normal(size=(T, B, A)).astype(np.float32),
        values=rng.normal(size=(T, B)).astype(np.float32),
        rewards=rng.normal(size=(T, B)).astype(np.float32),
        discounts=(0.99 * (rng.random((T, B)) > 0.2)).astype(np.float32),
        bootstrap_value=rng.normal(size=B).astype(np.float32),
        last_obs=rng.integers(0, 256, (B,) + obs_shape, dtype=np.uint8),
    )


@pytest.mark.parametrize("algo", ["IMPALA", "APPO", "A2C", "A3C", "PPO", "DQN", "APEX"])
def test_same_result_as_jit_and_observations_not_copied(algo):
    spec = get_algorithm(algo)
    fn = functools.partial(spec.postprocess, config=spec.config_cls(env="CartPole-v1"))
    traj = fragment(np.random.default_rng(0))
    expected = jax.device_get(jax.jit(fn)(traj))
    pp = HostPostprocess(fn)
    for _ in range(2):  # the second call reuses the first's plan
        out = pp(traj)
        assert out.keys() == expected.keys()
        for k in expected:
            assert out[k].dtype == expected[k].dtype, k
            np.testing.assert_array_equal(out[k], expected[k], err_msg=k)
        assert out["obs"] is traj["obs"]
    assert len(pp._plans) == 1
    # The observations never enter the compiled call: nothing there reads them.
    _, needed, _, _ = next(iter(pp._plans.values()))
    assert "obs" not in needed and "last_obs" not in needed


def test_reads_what_it_computes_with_and_converts_like_jit():
    def fn(t):
        return {"obs": t["obs"], "brightness": t["obs"].mean(axis=(2, 3, 4)), "x": t["x"], "y": t["y"]}

    traj = dict(obs=fragment(np.random.default_rng(1))["obs"], x=np.arange(3.0), y=np.arange(3, dtype=np.float32))
    out = HostPostprocess(fn)(traj)
    np.testing.assert_allclose(out["brightness"], traj["obs"].mean(axis=(2, 3, 4)), rtol=1e-6)
    assert out["obs"] is traj["obs"] and out["y"] is traj["y"]
    # float64 in, float32 out under jit (x64 off): the converted array, as jit returns it.
    assert out["x"].dtype == np.float32 and out["x"] is not traj["x"]
    np.testing.assert_array_equal(out["x"], traj["x"])


def test_a_new_shape_gets_its_own_plan():
    pp = HostPostprocess(lambda t: {"obs": t["obs"], "total": jnp.sum(t["r"], axis=0)})
    for n in (2, 5):
        traj = {"obs": np.zeros((3, n, 2), np.uint8), "r": np.ones((3, n), np.float32)}
        out = pp(traj)
        np.testing.assert_array_equal(out["total"], np.full(n, 3.0))
        assert out["obs"] is traj["obs"]
    assert len(pp._plans) == 2


def test_computed_fields_come_back_as_numpy():
    out = HostPostprocess(lambda t: {"r2": 2 * t["r"]})({"r": np.array([1.0, -2.0, 0.5], np.float32)})
    assert isinstance(out["r2"], np.ndarray)
    np.testing.assert_array_equal(out["r2"], np.array([2.0, -4.0, 1.0], np.float32))


def test_nested_output_is_refused():
    with pytest.raises(TypeError, match="flat dict"):
        HostPostprocess(lambda t: {"a": {"b": t["r"]}, "c": t["r"]})({"r": np.ones(3, np.float32)})
