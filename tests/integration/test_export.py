"""An exported policy acts without jaxflow: loaded by JAX and numpy alone in a fresh
process, it takes the actions ``jaxflow evaluate`` takes."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxflow import Algorithm
from jaxflow.api import cli
from jaxflow.api.algorithm import load_policy
from jaxflow.api.export import DESCRIPTION_FILE, export_policy
from jaxflow.rollout.normalize import normalize_observations

NUM_OBS = 100

# What the README shows, run where jaxflow is never imported.
LOADER = """
import sys, jax, numpy as np
act = jax.export.deserialize(open(sys.argv[1] + "/policy.jaxexport", "rb").read())
actions = act.call(dict(np.load(sys.argv[1] + "/params.npz")), np.load(sys.argv[2]))
assert not [m for m in sys.modules if m.startswith("jaxflow")], "the loader imported jaxflow"
np.save(sys.argv[3], np.asarray(actions))
"""


def evaluate_actions(run: str, obs: np.ndarray) -> np.ndarray:
    """The actions evaluation takes (rollout/evaluation.py's steps: numpy normalization, the
    jitted greedy policy, the distribution's rescaling to the env's bounds)."""
    config, policy, params, normalizer = load_policy(run)
    if normalizer is not None:
        obs = normalize_observations(normalizer.obs, obs, config.rollout.normalize_clip)
    return policy.distribution.to_env(np.asarray(jax.jit(policy.greedy)(params, obs)))


NORMALIZED_PENDULUM = dict(
    rollout_fragment_length=16,
    minibatch_size=64,
    iterations_per_call=2,
    normalize_observations=True,
    scale_rewards=True,
)
"""The device run of tests/integration/test_normalization.py (with ``num_envs=8``): one compiled
program for both tests, from the session's XLA cache."""


@pytest.mark.parametrize(
    "env, fields, obs_dim, train",
    [
        ("gymnax/CartPole-v1", {}, 4, False),  # categorical: argmax (initial parameters: no compile needed)
        # Box: the mean, rescaled to the bounds; trained, so the statistics inside are not the identity
        ("gymnax/Pendulum-v1", NORMALIZED_PENDULUM, 3, True),
    ],
)
def test_exported_policy_acts_as_evaluate_does_without_jaxflow(tmp_path, env, fields, obs_dim, train):
    algo = Algorithm.build("PPO", env=env, num_envs=8, seed=3, **fields)
    if train:
        algo.train()
    algo.save(str(tmp_path / "run"))
    if train:
        out = export_policy(str(tmp_path / "run"), str(tmp_path / "export"))
    else:  # through the command line
        assert cli.main(["export", "--checkpoint", str(tmp_path / "run"), "--out", str(tmp_path / "export")]) == 0
        out = str(tmp_path / "export")
    obs = np.random.default_rng(0).normal(0.0, 2.0, (NUM_OBS, obs_dim)).astype(np.float32)
    np.save(tmp_path / "obs.npy", obs)
    subprocess.run(
        [sys.executable, "-c", LOADER, out, str(tmp_path / "obs.npy"), str(tmp_path / "actions.npy")],
        check=True,
        cwd=tmp_path,
    )
    exported = np.load(tmp_path / "actions.npy")
    expected = evaluate_actions(str(tmp_path / "run"), obs)
    assert exported.shape == expected.shape and exported.dtype == expected.dtype
    np.testing.assert_allclose(exported, expected, rtol=1e-5, atol=1e-6)
    assert len(np.unique(expected)) > 1  # the observations reach different actions
    description = json.loads((tmp_path / "export" / DESCRIPTION_FILE).read_text())
    assert description["env"] == env and description["observation"]["shape"] == [obs_dim]
