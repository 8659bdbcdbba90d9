"""ES and ARS: centered ranks, the two search directions on hand-checked examples, bad
settings refused before anything starts, and a checkpoint's round trip. (The shared noise
table read alike by two real Ray workers is shown by the Ray-mode learning test, which starts
them anyway: tests/learning/test_es_learning.py.)"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow import Algorithm, ConfigError, make_config
from jaxflow.algorithms.es import (
    ARSConfig,
    ESConfig,
    SearchSpec,
    SearchWorker,
    antithetic_gradient,
    centered_ranks,
    noise_table,
    top_directions_gradient,
)
from jaxflow.api.registry import get_algorithm
from jaxflow.api.spaces import env_spaces

SMALL_TABLE = 100_000
TINY = dict(env="gymnax/CartPole-v1", population_size=4, noise_table_size=SMALL_TABLE, hidden_sizes=(4,))


def test_centered_ranks_by_hand():
    # sorted: 1 < 2 < 3 < 7 are ranks 0..3, scaled by 1/3 and shifted by -1/2
    got = centered_ranks(jnp.array([[3.0, 1.0], [2.0, 7.0]]))
    np.testing.assert_allclose(got, [[1 / 6, -1 / 2], [-1 / 6, 1 / 2]], atol=1e-7)
    # ties share their mean rank: ranks 0.5, 0.5, 2 of 0..2
    np.testing.assert_allclose(centered_ranks(jnp.array([1.0, 1.0, 2.0])), [-0.25, -0.25, 0.5], atol=1e-7)


def test_antithetic_gradient_by_hand():
    # two pairs: r+ = (3, 1), r- = (2, 7); centered ranks of all four (as above):
    # F(r+) = (1/6, -1/2), F(r-) = (-1/6, 1/2), weights F(r+) - F(r-) = (1/3, -1);
    # sum_i w_i eps_i = (1/3, -2), divided by 2 n sigma = 2 * 2 * 0.5 = 2.
    noise = jnp.array([[1.0, 0.0], [0.0, 2.0]])
    got = antithetic_gradient(jnp.array([3.0, 1.0]), jnp.array([2.0, 7.0]), noise, 0.5)
    np.testing.assert_allclose(got, [1 / 6, -1.0], atol=1e-6)


def test_top_directions_gradient_by_hand():
    # max(r+, r-) = (3, 7, 5): the top 2 are directions 1 and 2; their returns (1, 5, 7, 0)
    # have std sqrt(32.75 / 4); the step is ((1 - 7) eps_1 + (5 - 0) eps_2) / (2 std).
    noise = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    got = top_directions_gradient(jnp.array([3.0, 1.0, 5.0]), jnp.array([2.0, 7.0, 0.0]), noise, 2)
    np.testing.assert_allclose(got, np.array([5.0, -1.0]) / (2 * np.sqrt(32.75 / 4)), rtol=1e-6)
    # all kept returns equal: no step, not a division by 0
    same = top_directions_gradient(jnp.ones(3), jnp.ones(3), noise, 2)
    np.testing.assert_array_equal(same, [0.0, 0.0])


@pytest.mark.parametrize(
    "cls, overrides, match",
    [
        (ESConfig, dict(population_size=7), r"ESConfig\.population_size must be even"),
        (ESConfig, dict(noise_std=0.0), r"noise_std must satisfy 0 < value"),
        (ESConfig, dict(mode="ray", population_size=6, num_workers=2), r"population_size / 2 \(3\) must be a multiple"),
        (ESConfig, dict(num_seeds=2), r"num_seeds, sweep and pbt are not supported"),
        (ARSConfig, dict(population_size=8, top_directions=5), r"top_directions \(5\) must be at most"),
        (ESConfig, dict(noise_table_size=10), r"noise_table_size must be at least 1000"),
        (
            ARSConfig,
            dict(max_episode_length=0),
            r"ARSConfig\.max_episode_length must satisfy 0 < value <= 2147483647 \(MAX_SIZE\), got 0",
        ),
    ],
)
def test_bad_settings_are_refused_on_construction(cls, overrides, match):
    with pytest.raises(ConfigError, match=match):
        make_config(cls, **overrides)


def test_bad_runs_are_refused_before_anything_starts(monkeypatch):
    with pytest.raises(ConfigError, match=r"mode='device' runs gymnax/<id> envs, not 'CartPole-v1'"):
        Algorithm.build("ES", env="CartPole-v1", mode="device")
    with pytest.raises(ConfigError, match=r"noise_table_size \(1000\) must be at least the policy's 4610 parameters"):
        Algorithm.build("ES", env="gymnax/CartPole-v1", noise_table_size=1000, hidden_sizes=(64, 64))
    # auto mode on a gymnasium env is Ray mode: its workers must share the population too
    with pytest.raises(ConfigError, match=r"population_size / 2 \(3\) must be a multiple of num_workers \(2"):
        Algorithm.build("ES", env="CartPole-v1", population_size=6)
    monkeypatch.setattr(jax, "local_device_count", lambda: 3)  # as on a host with three accelerators
    with pytest.raises(ConfigError, match=r"population_size \(4\) must be a multiple of the 3 local devices"):
        Algorithm.build("ES", **TINY)


def test_a_checkpoint_restores_the_search_state(tmp_path):
    algo = Algorithm.build("ARS", **dict(TINY, top_directions=1, iterations_per_call=2))
    try:
        result = algo.train()
        assert result["training_iteration"] == 2 and result["num_updates"] == 2
        path = algo.save(str(tmp_path))
        state = algo.program.get_state()
        assert int(state.generation) == 2 and float(state.obs.count) == result["env_steps_sampled"]
    finally:
        algo.stop()
    back = Algorithm.restore(path)
    try:
        got = back.program.get_state()
        np.testing.assert_array_equal(got.theta, state.theta)
        np.testing.assert_array_equal(got.obs.mean, state.obs.mean)
        assert back.iteration == 2
        out = back.evaluate(episodes=2)
        assert out["episodes"] == 2 and np.isfinite(out["return_mean"])
    finally:
        back.stop()


CUT = 25  # steps after which the endless env's episodes are cut


def test_device_episodes_of_an_env_without_an_end_are_cut_at_max_episode_length():
    algo = Algorithm.build(
        "ARS", **dict(TINY, env="test/Endless-v0", top_directions=1, iterations_per_call=1, max_episode_length=CUT)
    )
    try:
        result = algo.train()  # 4 episodes of reward 1 per step, none ending by itself
        assert result["env_steps_sampled"] == 4 * CUT
        assert result["population"]["return_mean"] == CUT and result["episode_len_mean"] == CUT
        out = algo.evaluate(episodes=2)  # on the host, through the CPU wrapper: cut alike
        assert out["returns"] == [CUT, CUT] and out["lengths"] == [CUT, CUT]
    finally:
        algo.stop()


def test_ray_workers_episodes_of_an_env_without_an_end_are_cut_at_max_episode_length():
    """A Ray worker's own episode loop, run in this process (the class the actor wraps)."""
    spec = get_algorithm("ES")
    config = make_config(spec.config_cls, **dict(TINY, env="test/Endless-v0", mode="ray", max_episode_length=CUT))
    policy = spec.policy(config, *env_spaces(config, spec))
    worker = SearchWorker(SearchSpec(config, policy, np.asarray(noise_table(SMALL_TABLE))), 0)
    worker.set_weights(np.zeros(worker.dim, np.float32), 0)
    out = worker.evaluate(np.array([0, 7]), 0, 0, None)
    assert out["returns_pos"].tolist() == out["returns_neg"].tolist() == [CUT, CUT]
    assert out["lengths"].tolist() == [CUT] * 4 and out["moments"].count == 4 * CUT


def test_device_mode_compiles_its_generations_once():
    """The state starts (and is restored) where the compiled call leaves it, so later calls reuse the first's compilation."""
    algo = Algorithm.build("ES", **dict(TINY, iterations_per_call=1))
    try:
        algo.train()
        algo.train()
        algo.program.set_state(algo.program.get_state())  # as Algorithm.restore does
        result = algo.train()
        assert result["num_updates"] == 3 and algo.program._run._cache_size() == 1
    finally:
        algo.stop()
