"""``Algorithm.evaluate`` on an environment with no time limit: its episodes are cut at a stated
step limit, with a warning, instead of playing forever; an env's own time limit is left alone."""

from __future__ import annotations

import logging

import gymnasium
import numpy as np
import pytest

from jaxflow import Algorithm
from jaxflow.rollout import evaluation

LIMIT = 40
"""The cut in this test, in place of EVALUATION_STEP_LIMIT (100,000 steps), to keep it short."""


def make_endless_env():
    class Endless(gymnasium.Env):
        """Reward 1 every step, never terminated, never truncated."""

        observation_space = gymnasium.spaces.Box(0.0, 1.0, (1,), np.float32)
        action_space = gymnasium.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(1, np.float32), {}

        def step(self, action):
            return np.zeros(1, np.float32), 1.0, False, False, {}

    return Endless


def test_episodes_without_a_time_limit_are_cut_at_the_limit_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(evaluation, "EVALUATION_STEP_LIMIT", LIMIT)
    algo = Algorithm.build("PPO", env=make_endless_env(), num_workers=0, seed=0)
    try:
        with caplog.at_level(logging.WARNING, logger=evaluation.__name__):
            out = algo.evaluate(episodes=3)
        assert out["lengths"] == [LIMIT] * 3 and out["returns"] == [float(LIMIT)] * 3
        warnings = [r.getMessage() for r in caplog.records if r.name == evaluation.__name__]
        assert len(warnings) == 1 and "3 of 3 episodes" in warnings[0] and f"ran {LIMIT} steps" in warnings[0]
        assert "no time limit" in warnings[0]
    finally:
        algo.stop()


def test_an_envs_own_time_limit_ends_its_episodes_without_a_warning(monkeypatch, caplog):
    env_id = "EndlessWithLimit-v0"
    gymnasium.register(env_id, entry_point=make_endless_env(), max_episode_steps=25)
    monkeypatch.setattr(evaluation, "EVALUATION_STEP_LIMIT", LIMIT)
    try:
        algo = Algorithm.build("PPO", env=env_id, num_workers=0, seed=0)
        try:
            with caplog.at_level(logging.WARNING, logger=evaluation.__name__):
                assert algo.evaluate(episodes=2)["lengths"] == [25, 25]
            assert not [r for r in caplog.records if r.name == evaluation.__name__]
        finally:
            algo.stop()
    finally:
        del gymnasium.registry[env_id]


@pytest.mark.parametrize("own, expected", [(None, 100_000), (200_000, 200_000), (500, 100_000)])
def test_the_limit_is_the_default_or_the_envs_longer_one(own, expected):
    class Spec:
        max_episode_steps = own

    class Env:
        spec = Spec()

    assert evaluation.episode_limit(object(), Env()) == expected
