"""A recurrent PPO on Ray-mode workers learns the memory CartPole (velocities hidden), and its
checkpoint restores, evaluates and acts with the recurrent state."""

from __future__ import annotations

import numpy as np
import pytest

from jaxflow import Algorithm
from jaxflow.api.export import export_policy
from jaxflow.config import ConfigError
from jaxflow.envs import STATELESS_CARTPOLE

ITERATIONS = 40
"""Of 512 env steps each: 20,480 steps (measured: the return mean 21 -> 38, seed 0)."""
THRESHOLD = 30.0
"""A uniformly random policy's episodes last about 22 steps."""


@pytest.mark.learning
def test_ray_mode_recurrent_ppo_improves_on_the_memory_cartpole_and_restores(ray_local, tmp_path):
    algo = Algorithm.build(
        "PPO", env=STATELESS_CARTPOLE, mode="ray", use_lstm=True, lstm_size=64, hidden_sizes=(64,),
        gamma=0.95, lr=3e-3, vf_coef=0.1, num_workers=0, num_envs_per_worker=16,
        rollout_fragment_length=32, train_batch_size=512, minibatch_size=128, seed=0,
    )  # fmt: skip
    try:
        first = algo.train()["episode_return_mean"]
        for _ in range(ITERATIONS - 1):
            result = algo.train()
        assert result["episode_return_mean"] >= max(THRESHOLD, first + 5.0), (first, result["episode_return_mean"])
        path = algo.save(str(tmp_path / "run"))
    finally:
        algo.stop()
    restored = Algorithm.restore(path)
    try:
        out = restored.evaluate(episodes=4, seed=1)
        assert out["episodes"] == 4 and out["return_mean"] > first, (first, out["return_mean"])
        actions, state = restored.compute_actions(np.zeros((3, 2), np.float32))
        assert actions.shape == (3,) and [s.shape for s in state] == [(3, 64)] * 2
    finally:
        restored.stop()
    with pytest.raises(ConfigError, match="holds a recurrent policy"):
        export_policy(path, str(tmp_path / "exported"))
