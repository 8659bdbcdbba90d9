"""Multi-agent environments: the built-in games against hand-checked payoffs and known
optima, PettingZoo's own API test, the vectorised adapter and the registry."""

from __future__ import annotations

import math
import warnings
from typing import ClassVar

import gymnasium
import numpy as np
import pytest
from pettingzoo import ParallelEnv
from pettingzoo.test import parallel_api_test

from jaxflow import envs
from jaxflow.envs import (
    CoordinationGame,
    EnvContext,
    EnvKindError,
    EnvSpaceError,
    MultiAgentEnvError,
    MultiAgentVectorEnv,
    RockPaperScissors,
)

COORD, RPS = "multiagent/Coordination-v0", "multiagent/RockPaperScissors-v0"
ROCK, PAPER, SCISSORS = 0, 1, 2


@pytest.mark.parametrize("game", [CoordinationGame, RockPaperScissors])
def test_pettingzoo_parallel_api_test_passes_without_warnings(game):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test reports most violations as warnings
        parallel_api_test(game(), num_cycles=100)


def _cue(obs: np.ndarray) -> int:
    return int(np.argmax(obs[:-1]))


def test_coordination_rewards_both_only_when_both_play_the_cue():
    env = CoordinationGame()
    obs, _ = env.reset(seed=0)
    cue = _cue(obs["agent_0"])
    assert _cue(obs["agent_1"]) == cue and obs["agent_0"][-1] == 0.0
    _, r, te, tr, _ = env.step({"agent_0": cue, "agent_1": cue})
    assert r == {"agent_0": 1.0, "agent_1": 1.0}
    assert te == tr == {"agent_0": False, "agent_1": False}
    for wrong_agent in ("agent_0", "agent_1"):
        obs, _ = env.reset(seed=1)
        cue = _cue(obs["agent_0"])
        actions = {"agent_0": cue, "agent_1": cue}
        actions[wrong_agent] = (cue + 1) % 3
        _, r, _, _, _ = env.step(actions)
        assert r == {"agent_0": 0.0, "agent_1": 0.0}


def test_coordination_observation_is_one_hot_cue_and_elapsed_fraction():
    env = CoordinationGame(episode_length=4, num_actions=5)
    obs, _ = env.reset(seed=3)
    assert env.observation_space("agent_0").shape == (6,) and env.action_space("agent_1").n == 5
    for t in range(1, 5):
        obs, *_ = env.step({"agent_0": 0, "agent_1": 0})
        o = obs["agent_0"]
        assert o.dtype == np.float32 and o.shape == (6,)
        assert o[:5].sum() == 1.0 and set(np.unique(o[:5])) == {0.0, 1.0}
        assert o[-1] == pytest.approx(t / 4)


def test_coordination_cues_follow_the_seed():
    def cues(seed):
        env = CoordinationGame(episode_length=20)
        obs, _ = env.reset(seed=seed)
        out = [_cue(obs["agent_0"])]
        while env.agents:
            obs, *_ = env.step({"agent_0": 0, "agent_1": 0})
            out.append(_cue(obs["agent_0"]))
        return out

    assert cues(5) == cues(5)
    assert cues(5) != cues(6)
    assert set(cues(5)) == {0, 1, 2}


def test_scripted_optimal_coordination_policy_earns_episode_length():
    env = CoordinationGame(episode_length=7, num_actions=4)
    obs, _ = env.reset(seed=11)
    total = {"agent_0": 0.0, "agent_1": 0.0}
    steps = 0
    while env.agents:
        obs, r, te, tr, _ = env.step({a: _cue(obs[a]) for a in env.agents})
        steps += 1
        for a in total:
            total[a] += r[a]
    assert total == {"agent_0": 7.0, "agent_1": 7.0}
    assert steps == 7 and tr == {"agent_0": True, "agent_1": True} and not any(te.values())


def test_random_coordination_play_averages_episode_length_over_num_actions_squared():
    # A random pair succeeds with probability 1/9 per step, so an episode's return is
    # Binomial(10, 1/9): mean 10/9, sd sqrt(10 * 1/9 * 8/9). 2000 episodes, 4 standard errors.
    venv = MultiAgentVectorEnv(COORD, num_envs=20, seed=0)
    venv.reset()
    rng = np.random.default_rng(0)
    for _ in range(1000):
        venv.step({a: rng.integers(3, size=20) for a in venv.agents})
    episodes = venv.pop_episodes()
    returns, lengths = episodes["agent_0"]
    assert len(returns) == 2000 and np.all(lengths == 10)
    np.testing.assert_array_equal(returns, episodes["agent_1"][0])  # a team reward
    p = 1 / 9
    tolerance = 4 * math.sqrt(10 * p * (1 - p) / 2000)
    assert abs(returns.mean() - 10 * p) < tolerance, (returns.mean(), 10 * p, tolerance)


@pytest.mark.parametrize(
    "a0, a1, expected",
    [
        (PAPER, ROCK, 1.0),
        (ROCK, PAPER, -1.0),
        (SCISSORS, PAPER, 1.0),
        (PAPER, SCISSORS, -1.0),
        (ROCK, SCISSORS, 1.0),
        (SCISSORS, ROCK, -1.0),
        (ROCK, ROCK, 0.0),
        (PAPER, PAPER, 0.0),
        (SCISSORS, SCISSORS, 0.0),
    ],
)
def test_rock_paper_scissors_payoffs(a0, a1, expected):
    env = RockPaperScissors()
    env.reset(seed=0)
    _, r, _, _, _ = env.step({"agent_0": a0, "agent_1": a1})
    assert r == {"agent_0": expected, "agent_1": -expected}


def test_rock_paper_scissors_observes_the_opponents_previous_action_and_is_zero_sum():
    env = RockPaperScissors(episode_length=6)
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs["agent_0"], [0, 0, 0, 0])
    rng = np.random.default_rng(1)
    totals = np.zeros(2)
    for t in range(1, 7):
        a0, a1 = (int(x) for x in rng.integers(3, size=2))
        obs, r, _, _, _ = env.step({"agent_0": a0, "agent_1": a1})
        assert r["agent_0"] + r["agent_1"] == 0.0
        totals += (r["agent_0"], r["agent_1"])
        np.testing.assert_array_equal(obs["agent_0"], np.r_[np.eye(3)[a1], t / 6].astype(np.float32))
        np.testing.assert_array_equal(obs["agent_1"], np.r_[np.eye(3)[a0], t / 6].astype(np.float32))
    assert totals.sum() == 0.0 and env.agents == []


def test_always_paper_beats_always_rock_by_episode_length():
    env = RockPaperScissors(episode_length=8)
    env.reset(seed=0)
    total = {"agent_0": 0.0, "agent_1": 0.0}
    while env.agents:
        _, r, _, _, _ = env.step({"agent_0": PAPER, "agent_1": ROCK})
        for a in total:
            total[a] += r[a]
    assert total == {"agent_0": 8.0, "agent_1": -8.0}


def test_games_reject_bad_actions_and_steps_after_the_end():
    env = CoordinationGame(episode_length=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="agent_1"):
        env.step({"agent_0": 0, "agent_1": 3})
    with pytest.raises(ValueError, match="expected actions for"):
        env.step({"agent_0": 0})
    env.step({"agent_0": 0, "agent_1": 0})
    with pytest.raises(RuntimeError, match="reset"):
        env.step({"agent_0": 0, "agent_1": 0})
    with pytest.raises(ValueError, match="episode_length"):
        RockPaperScissors(episode_length=0)


# --- MultiAgentVectorEnv -------------------------------------------------------------------


def test_vector_env_shapes_dtypes_and_per_copy_seeds():
    venv = MultiAgentVectorEnv(COORD, num_envs=3, seed=7, env_config={"num_actions": 4})
    assert venv.agents == ["agent_0", "agent_1"] and venv.num_envs == 3
    assert venv.observation_spaces["agent_1"].shape == (5,) and venv.action_spaces["agent_0"].n == 4
    obs = venv.reset()
    for i in range(3):  # copy i is seeded with seed + i
        expected, _ = CoordinationGame(num_actions=4).reset(seed=7 + i)
        np.testing.assert_array_equal(obs["agent_0"][i], expected["agent_0"])
    step = venv.step({a: np.zeros(3, np.int64) for a in venv.agents})
    for a in venv.agents:
        assert step.obs[a].shape == step.final_obs[a].shape == (3, 5) and step.obs[a].dtype == np.float32
        assert step.reward[a].shape == (3,) and step.reward[a].dtype == np.float32
        assert step.terminated[a].dtype == step.truncated[a].dtype == np.dtype(bool)
    venv.close()


def test_vector_env_auto_resets_at_the_time_limit():
    venv = MultiAgentVectorEnv(COORD, num_envs=2, seed=0, env_config={"episode_length": 5})
    venv.reset()
    zeros = {a: np.zeros(2, np.int64) for a in venv.agents}
    for t in range(1, 5):
        step = venv.step(zeros)
        for a in venv.agents:
            assert not step.truncated[a].any() and not step.terminated[a].any()
            np.testing.assert_array_equal(step.final_obs[a], step.obs[a])
            np.testing.assert_allclose(step.obs[a][:, -1], t / 5)
    step = venv.step(zeros)
    for a in venv.agents:
        assert step.truncated[a].all() and not step.terminated[a].any()
        np.testing.assert_array_equal(step.final_obs[a][:, -1], [1.0, 1.0])  # the ended episode's last obs
        np.testing.assert_array_equal(step.obs[a][:, -1], [0.0, 0.0])  # a fresh episode's first obs
    step = venv.step(zeros)  # the new episode runs on
    assert not step.truncated["agent_0"].any()
    np.testing.assert_allclose(step.obs["agent_0"][:, -1], 1 / 5)


def test_vector_env_pop_episodes_counts_and_returns():
    venv = MultiAgentVectorEnv(RPS, num_envs=3, seed=0)
    venv.reset()
    assert {a: len(v[0]) for a, v in venv.pop_episodes().items()} == {"agent_0": 0, "agent_1": 0}
    actions = {"agent_0": np.full(3, PAPER), "agent_1": np.full(3, ROCK)}
    for _ in range(25):  # two full episodes per copy, then half of a third
        venv.step(actions)
    episodes = venv.pop_episodes()
    np.testing.assert_array_equal(episodes["agent_0"][0], np.full(6, 10.0, np.float32))
    np.testing.assert_array_equal(episodes["agent_1"][0], np.full(6, -10.0, np.float32))
    np.testing.assert_array_equal(episodes["agent_0"][1], np.full(6, 10, np.int32))
    for _ in range(5):  # the third episodes end; their first half was not lost
        venv.step(actions)
    returns, lengths = venv.pop_episodes()["agent_0"]
    np.testing.assert_array_equal(returns, [10.0, 10.0, 10.0])
    np.testing.assert_array_equal(lengths, [10, 10, 10])


def test_vector_env_optimal_coordination_returns_episode_length():
    venv = MultiAgentVectorEnv(COORD, num_envs=4, seed=2)
    obs = venv.reset()
    for _ in range(20):
        obs = venv.step({a: np.argmax(obs[a][:, :-1], axis=1) for a in venv.agents}).obs
    for returns, lengths in venv.pop_episodes().values():
        np.testing.assert_array_equal(returns, np.full(8, 10.0))
        np.testing.assert_array_equal(lengths, np.full(8, 10))


@pytest.mark.parametrize("bad", [np.array([0, 3]), np.array([0.0, 1.0]), np.array([-1, 0])])
def test_vector_env_rejects_actions_outside_the_space(bad):
    venv = MultiAgentVectorEnv(COORD, num_envs=2, seed=0)
    venv.reset()
    with pytest.raises(EnvSpaceError) as e:
        venv.step({"agent_0": np.array([0, 1]), "agent_1": bad})
    message = str(e.value)
    assert COORD in message and "'agent_1'" in message and "Discrete(3)" in message


def test_vector_env_rejects_missing_agents_and_wrong_batch_size():
    venv = MultiAgentVectorEnv(COORD, num_envs=2, seed=0)
    venv.reset()
    with pytest.raises(MultiAgentEnvError, match="agent_1"):
        venv.step({"agent_0": np.array([0, 1])})
    with pytest.raises(MultiAgentEnvError, match=r"\(3,\)"):
        venv.step({"agent_0": np.array([0, 1]), "agent_1": np.array([0, 1, 2])})


class _Misbehaving(ParallelEnv):
    """A user env registered through the adapter path; ``fault`` picks how it breaks the adapter's rules."""

    metadata: ClassVar[dict] = {"name": "misbehaving_v0"}

    def __init__(self, fault: str = "none"):
        self.possible_agents = ["red", "blue"]
        self.agents: list[str] = []
        self._fault, self._t = fault, 0
        self._obs_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._act_space = gymnasium.spaces.Discrete(2)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def _obs(self, agents, shape=(2,)):
        return {a: np.zeros(shape, np.float32) for a in agents}

    def reset(self, seed=None, options=None):
        self.agents, self._t = list(self.possible_agents), 0
        return self._obs(self.agents), {a: {} for a in self.agents}

    def step(self, actions):
        self._t += 1
        live = list(self.agents)
        done = dict.fromkeys(live, False)
        if self._fault == "drop_one" and self._t == 2:
            done["blue"] = True
            self.agents = ["red"]
        shape = (3,) if self._fault == "bad_obs" else (2,)
        return self._obs(live, shape), dict.fromkeys(live, 0.5), done, dict.fromkeys(live, False), {}


envs.register_multiagent("test/Misbehaving-v0", lambda context, **kw: _Misbehaving(**kw))


def test_vector_env_runs_a_user_registered_env():
    venv = MultiAgentVectorEnv("test/Misbehaving-v0", num_envs=2, seed=0)
    assert venv.agents == ["red", "blue"]
    obs = venv.reset()
    step = venv.step({a: np.array([0, 1]) for a in venv.agents})
    assert obs["blue"].shape == (2, 2)
    np.testing.assert_array_equal(step.reward["red"], [0.5, 0.5])


def test_vector_env_refuses_envs_whose_agents_end_at_different_steps():
    venv = MultiAgentVectorEnv("test/Misbehaving-v0", num_envs=2, seed=0, env_config={"fault": "drop_one"})
    venv.reset()
    acts = {a: np.zeros(2, np.int64) for a in venv.agents}
    venv.step(acts)
    with pytest.raises(MultiAgentEnvError) as e:
        venv.step(acts)
    message = str(e.value)
    assert "test/Misbehaving-v0" in message and "['blue']" in message and "['red']" in message


def test_vector_env_checks_observation_shapes_per_agent():
    venv = MultiAgentVectorEnv("test/Misbehaving-v0", num_envs=1, seed=0, env_config={"fault": "bad_obs"})
    venv.reset()
    with pytest.raises(EnvSpaceError) as e:
        venv.step({a: np.zeros(1, np.int64) for a in venv.agents})
    message = str(e.value)
    assert "test/Misbehaving-v0" in message and "'red'" in message and "(3,)" in message and "(2,)" in message


# --- registry ------------------------------------------------------------------------------


def test_registry_knows_the_multiagent_kind():
    ids = envs.list_envs("multiagent")
    assert {COORD, RPS, "test/Misbehaving-v0"} <= set(ids) and ids == sorted(ids)
    assert all(envs.entry(i).kind == "multiagent" for i in ids)
    assert COORD in envs.list_envs() and COORD not in envs.list_envs("gymnasium")
    e = envs.entry(RPS)
    assert e.kind == "multiagent" and e.id == RPS
    env = envs.make_multiagent(COORD, EnvContext(seed=3), episode_length=4)
    assert isinstance(env, CoordinationGame) and env.episode_length == 4
    assert isinstance(envs.make_multiagent(RPS), RockPaperScissors)


@pytest.mark.parametrize("maker", [envs.make, envs.make_cpu])
def test_single_agent_makers_refuse_multiagent_ids(maker):
    with pytest.raises(EnvKindError, match="make_multiagent") as e:
        maker(COORD)
    assert isinstance(e.value, ValueError) and COORD in str(e.value)


def test_make_multiagent_refuses_single_agent_ids_and_suggests_close_ids():
    with pytest.raises(EnvKindError, match="envs.make"):
        envs.make_multiagent("CartPole-v1")
    with pytest.raises(envs.UnknownEnvError, match="multiagent/RockPaperScissors-v0"):
        envs.make_multiagent("multiagent/RockPaperSissors-v0")
