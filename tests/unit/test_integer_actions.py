"""Integer ``Box`` action spaces are the discrete choices they are (issue 44: gymnasium's
``tabular/CliffWalking-v0`` was listed with a ``Box(1,)`` action, SAC and TD3 fitting it)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from jaxflow import envs
from jaxflow.api.registry import get_algorithm
from jaxflow.api.spaces import check_spaces
from jaxflow.config import ConfigError

CLIFF = "tabular/CliffWalking-v0"
START = 36
"""CliffWalking's start cell: row 3, column 0 of the 4 x 12 grid, numbered row * 12 + column."""


class Recorder(gymnasium.Env):
    """An env whose actions are two integers, ``[-1, 1]`` and ``[0, 4]``; it keeps what it was given."""

    observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = spaces.Box(np.array([-1, 0]), np.array([1, 4]), dtype=np.int64)

    def __init__(self) -> None:
        self.taken: list[np.ndarray] = []

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.taken.append(action)
        return np.zeros(1, np.float32), 0.0, False, False, {}


def test_cliff_walking_takes_discrete_moves():
    env = envs.make_cpu(CLIFF)
    assert env.action_space == spaces.Discrete(4)
    obs, _ = env.reset(seed=0)
    assert int(np.asarray(obs)[0]) == START
    cells = []
    for move in (0, 1, 2):  # up one row; right one column; down again onto the cliff, back to the start
        obs, reward, *_ = env.step(move)
        cells.append((int(np.asarray(obs)[0]), float(reward)))
    assert cells == [(START - 12, -1.0), (START - 11, -1.0), (START, -100.0)]


def test_discrete_algorithms_fit_it_and_continuous_ones_are_refused():
    env = envs.make_cpu(CLIFF)
    for name in ("DQN", "PPO"):
        check_spaces(get_algorithm(name), CLIFF, env.observation_space, env.action_space)
    for name in ("SAC", "TD3", "DDPG"):
        with pytest.raises(ConfigError, match=r"its action space is Discrete\(4\)"):
            check_spaces(get_algorithm(name), CLIFF, env.observation_space, env.action_space)


def test_several_integer_components_become_multi_discrete_counted_from_their_lows():
    inner = Recorder()
    env = envs.discrete_actions(inner)
    assert env.action_space == spaces.MultiDiscrete([3, 5])
    env.step(np.array([0, 4]))
    env.step(np.array([2, 0]))
    assert [a.tolist() for a in inner.taken] == [[-1, 4], [1, 0]]
    assert all(a.dtype == np.int64 for a in inner.taken)


@pytest.mark.parametrize(
    "space, choice",
    [
        (spaces.Box(0, 3, (1,), np.int32), True),
        (spaces.Box(0, 3, (), np.int32), True),
        (spaces.Box(-1.0, 1.0, (1,), np.float32), False),  # real-valued: a continuous action
        (spaces.Box(0, 3, (2, 2), np.int32), False),  # 2-D: no policy acts in it either way
        (spaces.Box(np.iinfo(np.int32).min, np.iinfo(np.int32).max, (1,), np.int32), False),  # no menu
        (spaces.Discrete(4), False),
    ],
)
def test_which_spaces_are_choices(space, choice):
    assert envs.is_integer_choice(space) is choice
