"""Every observation space gymnasium can flatten reaches the policy as one float32 vector:
Discrete one-hot, Tuple and Dict concatenated; Box observations pass untouched; spaces that
cannot be flattened are refused by name before anything starts."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from jaxflow import ConfigError, envs, get_algorithm, make_config
from jaxflow.api import check_spaces, cli, env_spaces
from jaxflow.envs.user_envs import EnvContext

# gymnasium 1.3 registers Taxi as v4 (v3 is gone); the observation space is the same Discrete(500).
TAXI = "Taxi-v4"


DICT_POSITION, DICT_GOAL = (0.25, -0.5), 2


class DictObservation(gymnasium.Env):
    """One step from a fixed observation: a Dict of a 2-D Box and a Discrete(3)."""

    observation_space = spaces.Dict({"position": spaces.Box(-1.0, 1.0, (2,), np.float32), "goal": spaces.Discrete(3)})
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 1.0, True, False, {}

    def _obs(self) -> dict[str, Any]:
        return {"position": np.array(DICT_POSITION, np.float32), "goal": DICT_GOAL}


class TextObservation(gymnasium.Env):
    """An env whose observations are strings: nothing a network can take."""

    observation_space = spaces.Text(8)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        return "hello", {}

    def step(self, action):
        return "hello", 0.0, True, False, {}


def _dict_env(context: EnvContext) -> gymnasium.Env:
    del context
    return DictObservation()


def _text_env(context: EnvContext) -> gymnasium.Env:
    del context
    return TextObservation()


envs.register("test/DictObservation-v0", _dict_env, "a Dict of a Box and a Discrete, one step")
envs.register("test/TextObservation-v0", _text_env, "Text observations, which cannot be flattened")


def one_hot(n: int, *indices: int) -> np.ndarray:
    out = np.zeros(n, np.float32)
    out[list(indices)] = 1.0
    return out


def test_frozen_lake_position_is_one_hot():
    env = envs.make_cpu("FrozenLake-v1", is_slippery=False)
    assert env.observation_space == spaces.Box(0.0, 1.0, (16,), np.float32)
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs, one_hot(16, 0))  # the start, top left
    # Non-slippery moves: down (1) to 4, then right (2) to 5 on the 4x4 map.
    env.step(1)
    obs, *_ = env.step(2)
    assert obs.dtype == np.float32
    np.testing.assert_array_equal(obs, one_hot(16, 5))


def test_taxi_state_is_one_hot_of_500():
    env = envs.make_cpu(TAXI)
    obs, _ = env.reset(seed=0)
    raw, _ = gymnasium.make(TAXI).reset(seed=0)
    assert obs.shape == (500,) and obs.sum() == 1.0
    assert int(obs.argmax()) == raw


def test_blackjack_tuple_is_three_one_hots_concatenated():
    """Tuple(Discrete(32), Discrete(11), Discrete(2)) -> 32 + 11 + 2 = 45 floats."""
    env = envs.make_cpu("Blackjack-v1")
    assert env.observation_space.shape == (45,)
    obs, _ = env.reset(seed=0)
    raw, _ = gymnasium.make("Blackjack-v1").reset(seed=0)
    assert raw == (11, 10, 0)  # player sum 11, dealer shows 10, no usable ace
    np.testing.assert_array_equal(obs, one_hot(45, 11, 32 + 10, 32 + 11 + 0))


def test_dict_is_flattened_in_key_order():
    """Dict keys sort to ("goal", "position"): one-hot of goal 2 of 3, then the Box as it is."""
    env = envs.make_cpu("test/DictObservation-v0")
    assert env.observation_space == spaces.Box(
        np.array([0, 0, 0, -1, -1], np.float32), np.array([1, 1, 1, 1, 1], np.float32), (5,), np.float32
    )
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs, np.array([0.0, 0.0, 1.0, 0.25, -0.5], np.float32))
    obs, *_ = env.step(0)
    np.testing.assert_array_equal(obs, np.array([0.0, 0.0, 1.0, 0.25, -0.5], np.float32))


def test_vector_env_stacks_flat_observations():
    venv = envs.VectorEnv("FrozenLake-v1", num_envs=3, seed=0, env_config={"is_slippery": False})
    obs = venv.reset()
    assert obs.shape == (3, 16) and obs.dtype == np.float32
    np.testing.assert_array_equal(obs.argmax(axis=1), [0, 0, 0])
    step = venv.step(np.array([1, 2, 0]))  # down to 4, right to 1, left stays at 0
    np.testing.assert_array_equal(step.obs.argmax(axis=1), [4, 1, 0])


@pytest.mark.parametrize("env_id", ["CartPole-v1", "ALE/Pong-v5"])
def test_box_observations_are_not_wrapped(env_id):
    env = envs.make_cpu(env_id)
    raw = env
    while isinstance(raw, gymnasium.Wrapper):
        assert not isinstance(raw, envs.FlatObservation)
        raw = raw.env
    if env_id == "ALE/Pong-v5":  # images stay uint8 frames
        assert env.observation_space.dtype == np.uint8 and env.observation_space.shape == (4, 84, 84)


def test_flattenable_spaces():
    discrete, box = spaces.Discrete(3), spaces.Box(0.0, 1.0, (2,))
    assert envs.is_flattenable(spaces.Dict({"a": spaces.Tuple([discrete, spaces.MultiBinary(4)]), "b": box}))
    assert envs.is_flattenable(spaces.MultiDiscrete([2, 3]))
    for space in [
        spaces.Text(4),
        spaces.Sequence(discrete),
        spaces.Graph(box, None),
        spaces.Tuple([box, spaces.Text(4)]),
    ]:
        assert not envs.is_flattenable(space)


def test_multi_discrete_is_one_one_hot_per_component():
    flat = envs.flat_space(spaces.MultiDiscrete([2, 3]))
    assert flat.shape == (5,) and flat.dtype == np.float32
    np.testing.assert_array_equal(spaces.flatten(spaces.MultiDiscrete([2, 3]), np.array([1, 2])), [0, 1, 0, 0, 1])


def test_flattened_spaces_pass_the_space_check():
    config = make_config(get_algorithm("PPO").config_cls, env="Blackjack-v1")
    obs_space, action_space = env_spaces(config, get_algorithm("PPO"))
    assert obs_space.shape == (45,) and action_space == spaces.Discrete(2)


def test_unflattenable_observations_are_refused_by_name():
    config = make_config(get_algorithm("PPO").config_cls, env="test/TextObservation-v0")
    with pytest.raises(
        ConfigError, match=r"'test/TextObservation-v0' has observation space Text\(1, 8,.*cannot be flattened"
    ):
        env_spaces(config, get_algorithm("PPO"))


def test_an_unflattened_discrete_space_is_refused_with_the_reason():
    """A gymnax or multi-agent env's Discrete observations are not flattened (yet)."""
    with pytest.raises(ConfigError, match=r"'gymnax/FrozenLake-misc'.*flattened only for gymnasium envs"):
        check_spaces(get_algorithm("PPO"), "gymnax/FrozenLake-misc", spaces.Discrete(16), spaces.Discrete(4))


def test_cli_refuses_text_observations_before_ray(capsys):
    assert cli.main(["train", "--algo", "PPO", "--env", "test/TextObservation-v0"]) == 2
    assert "'test/TextObservation-v0' has observation space Text(" in capsys.readouterr().err
