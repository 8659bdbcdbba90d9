"""The Rendezvous game (continuous actions): PettingZoo's API test, hand-checked moves and
rewards, the walls, refused actions, seeded starts, and its known values (standing still
-20/3, the optimum -3/8 per agent) within stated statistical tolerances."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from jaxflow import envs
from jaxflow.envs import MultiAgentVectorEnv, Rendezvous

RENDEZVOUS = "multiagent/Rendezvous-v0"
EPISODES = 1000


def velocities(v0: float, v1: float) -> dict[str, np.ndarray]:
    return {"agent_0": np.array([v0], np.float32), "agent_1": np.array([v1], np.float32)}


def test_pettingzoo_parallel_api_test_passes_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test reports most violations as warnings
        parallel_api_test(Rendezvous(), num_cycles=100)


def test_a_step_moves_each_agent_by_its_velocity_stops_at_the_ends_and_pays_minus_the_distance():
    env = Rendezvous(episode_length=3, max_speed=0.5)
    assert env.action_space("agent_0").shape == (1,) and env.action_space("agent_1").high.tolist() == [0.5]
    obs, _ = env.reset(seed=4)
    x0, x1 = float(obs["agent_0"][0]), float(obs["agent_0"][1])
    np.testing.assert_array_equal(obs["agent_1"], np.array([x1, x0, 0.0], np.float32))
    obs, r, te, tr, _ = env.step(velocities(0.5, -0.25))
    x0, x1 = min(x0 + 0.5, 1.0), max(x1 - 0.25, -1.0)
    np.testing.assert_allclose(obs["agent_0"], [x0, x1, 1 / 3], atol=1e-6)
    assert r["agent_0"] == r["agent_1"] == pytest.approx(-abs(x0 - x1), abs=1e-6)
    assert not any(te.values()) and not any(tr.values())
    for t in (2, 3):  # agent_0 runs into the end at 1 and stays there
        obs, r, te, tr, _ = env.step(velocities(0.5, 0.0))
        x0 = min(x0 + 0.5, 1.0)
        np.testing.assert_allclose(obs["agent_1"], [x1, x0, t / 3], atol=1e-6)
        assert r["agent_1"] == pytest.approx(-abs(x0 - x1), abs=1e-6)
    assert x0 == 1.0 and tr == {"agent_0": True, "agent_1": True} and not any(te.values()) and env.agents == []
    with pytest.raises(RuntimeError, match="reset"):
        env.step(velocities(0.0, 0.0))


@pytest.mark.parametrize("bad", [np.array([0.26], np.float32), np.array([0.0, 0.0], np.float32), 0.1])
def test_actions_outside_the_box_are_refused_naming_the_agent(bad):
    env = Rendezvous()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="agent_1.*outside Box"):
        env.step({"agent_0": np.zeros(1, np.float32), "agent_1": bad})


def test_starts_follow_the_seed_and_cover_the_line():
    def start(seed: int | None, env: Rendezvous) -> list[float]:
        return env.reset(seed=seed)[0]["agent_0"][:2].tolist()

    assert start(5, Rendezvous()) == start(5, Rendezvous()) != start(6, Rendezvous())
    env = Rendezvous()
    start(0, env)
    x = np.array([start(None, env) for _ in range(EPISODES)])
    assert x.min() >= -1.0 and x.max() <= 1.0
    # Uniform on [-1, 1]: mean 0, sd 1/sqrt(3); 4 standard errors.
    assert np.abs(x.mean(axis=0)).max() < 4 / math.sqrt(3 * EPISODES)


def play(policy, num_envs: int = 20) -> np.ndarray:
    """``EPISODES`` episodes of ``policy(obs [B, 3]) -> velocities [B, 1]`` for both agents; agent_0's returns."""
    venv = MultiAgentVectorEnv(RENDEZVOUS, num_envs=num_envs, seed=0)
    obs = venv.reset()
    for _ in range(EPISODES // num_envs * 10):
        obs = venv.step({a: policy(obs[a]).astype(np.float32) for a in venv.agents}).obs
    episodes = venv.pop_episodes()
    np.testing.assert_array_equal(episodes["agent_0"][0], episodes["agent_1"][0])  # a team reward
    return episodes["agent_0"][0]


def test_standing_still_returns_minus_20_over_3():
    returns = play(lambda o: np.zeros((len(o), 1)))
    tolerance = 4 * returns.std() / math.sqrt(len(returns))
    assert len(returns) == EPISODES and abs(returns.mean() + 20 / 3) < tolerance, (returns.mean(), tolerance)


def test_meeting_at_full_speed_returns_the_optimum_minus_3_over_8():
    def meet(o: np.ndarray) -> np.ndarray:  # half the gap per agent, at most max_speed: they stop where they meet
        return np.clip((o[:, 1:2] - o[:, 0:1]) / 2, -0.25, 0.25)

    returns = play(meet)
    tolerance = 4 * returns.std() / math.sqrt(len(returns))
    assert abs(returns.mean() + 3 / 8) < tolerance and returns.max() <= 0.0, (returns.mean(), tolerance)


def test_registered_as_a_multiagent_env():
    assert RENDEZVOUS in envs.list_envs("multiagent")
    env = envs.make_multiagent(RENDEZVOUS, envs.EnvContext(seed=0), episode_length=4, max_speed=0.5)
    assert isinstance(env, Rendezvous) and env.episode_length == 4 and env.max_speed == 0.5
    with pytest.raises(ValueError, match="max_speed"):
        Rendezvous(max_speed=0.0)
    with pytest.raises(ValueError, match="episode_length"):
        Rendezvous(episode_length=0)
