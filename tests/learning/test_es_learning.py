"""ES and ARS solve CartPole, as their tuned examples state (``examples/tuned/es-gymnax-cartpole``,
``es-cartpole``, ``ars-gymnax-cartpole``: a mean return of 475 over the last 100 episodes within
their budgets of generations), and then greedily (return >= 475 over 20 evaluation episodes):
ES in device mode (gymnax) and in Ray mode (gymnasium, two workers), ARS with a linear policy
(the argmax of a linear map of the normalized state) in device mode. The Ray run also shows its
two workers reading the same perturbation for an offset from the one noise table in the object store.

Measured on 2 CPU cores, seed 0: device ES reached it at generation 15 of its 40, Ray ES at
10 of 25, ARS at 15 of 40 (the same generations as the population's own mean reaching 475).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import ray
import tuned_examples as tuned

from jaxflow.algorithms.es import perturbations
from jaxflow.api.loop import train

pytestmark = pytest.mark.learning

TARGET = 475.0
EVALUATION_EPISODES = 20


def test_es_solves_cartpole_in_device_mode():
    _result, algo, _stop = tuned.run("es-gymnax-cartpole")
    assert algo.evaluate(EVALUATION_EPISODES)["return_mean"] >= TARGET  # on the host: the stopped run's weights


def test_es_solves_cartpole_in_ray_mode(ray_local):
    algo, stop = tuned.build("es-cartpole")
    try:
        tuned.assert_reaches("es-cartpole", train(algo, stop, verbose=False))
        assert algo.evaluate(EVALUATION_EPISODES)["return_mean"] >= TARGET
        program = algo.program
        offsets = np.array([0, 17, 123_456])
        a, b = ray.get([w.noise.remote(offsets) for _, w in program.workers.live()])
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, perturbations(jnp.asarray(program.table), jnp.asarray(offsets), program.dim))
    finally:
        algo.stop()


def test_ars_solves_cartpole_with_a_linear_policy():
    _result, algo, _stop = tuned.run("ars-gymnax-cartpole")
    assert algo.evaluate(EVALUATION_EPISODES)["return_mean"] >= TARGET
    assert algo.program.dim == 4 * 2 + 2  # linear: a 4 x 2 matrix and a bias
