"""POPGym's base environments by id: each made and stepped with its observations flattened,
its options checked, a typo and a missing package each one line."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from jaxflow import envs
from jaxflow.envs import popgym_envs
from jaxflow.envs.popgym_envs import MissingPOPGymError, popgym_classes

BASE_ENVS = 42
"""POPGym 1.0.7's diagnostic, control, noisy and game envs, 14 tasks at 3 difficulties."""


def test_every_base_env_is_listed_made_and_stepped_with_flat_observations():
    ids = [i for i in envs.list_envs("gymnasium") if "popgym" in i]
    popgym_ids = [i for i in ids if i.startswith("popgym/")]
    assert len(popgym_ids) == BASE_ENVS and ids == popgym_ids  # POPGym's own "popgym-" ids listed once, here
    assert not [i for i in popgym_ids if "Labyrinth" in i]  # the navigation envs need mazelib
    for env_id in popgym_ids:
        env = envs.make_cpu(env_id)
        assert isinstance(env.observation_space, gymnasium.spaces.Box), env_id
        assert env.observation_space.dtype == np.float32 and env.observation_space.shape[0] >= 1, env_id
        obs, _ = env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(3):
            assert env.observation_space.contains(obs), (env_id, obs)
            obs, reward, _, truncated, _ = env.step(env.action_space.sample())
            assert -1.0 <= float(reward) <= 1.0 and not truncated, env_id
        assert envs.entry(env_id).kind == "gymnasium"


def test_a_discrete_observation_is_one_hot_and_an_episode_ends_by_the_games_rule():
    """RepeatPreviousEasy: one deck of 52 cards, a card's suit shown per step (one-hot of 4);
    the reward says whether the action named the suit shown 4 steps before (±1/48), so the
    suits themselves score 1 over the 51 steps of an episode."""
    env = envs.make_cpu("popgym/RepeatPreviousEasy-v0")
    obs, _ = env.reset(seed=3)
    suits, total, steps, done = [int(obs.argmax())], 0.0, 0, False
    while not done:
        assert obs.sum() == 1.0
        action = suits[-4] if len(suits) >= 4 else 0
        obs, reward, done, truncated, _ = env.step(action)
        suits.append(int(obs.argmax()))
        total, steps = total + reward, steps + 1
        assert not truncated
    assert steps == 51 and total == pytest.approx(1.0)
    assert sorted(np.bincount(suits[:52], minlength=4).tolist()) == [13, 13, 13, 13]  # one deck


def test_options_are_the_classes_parameters_and_a_typo_is_one_line():
    assert envs.env_options("popgym/RepeatPreviousEasy-v0") == ["k", "num_decks"]
    assert envs.env_options("popgym/RepeatPreviousHard-v0") == []  # its settings are fixed
    assert envs.make_cpu("popgym/RepeatPreviousEasy-v0", k=2).unwrapped.k == 2
    with pytest.raises(envs.EnvOptionError, match="popgym/RepeatPreviousEasy-v0: env_config key 'kk'.*Allowed: k"):
        envs.check_env_config("popgym/RepeatPreviousEasy-v0", {"kk": 2})
    with pytest.raises(envs.UnknownEnvError, match=r"Did you mean one of \['popgym/RepeatPreviousEasy-v0'"):
        envs.entry("popgym/RepeatPrevousEasy-v0")


def test_without_the_package_an_id_names_the_extra(monkeypatch):
    monkeypatch.setattr(popgym_envs, "POPGYM_MODULE", "jaxflow_no_such_library")
    popgym_classes.cache_clear()
    try:
        with pytest.raises(MissingPOPGymError, match=r"need the jaxflow_no_such_library package.*jaxflow-rl\[popgym\]"):
            popgym_classes()
        with pytest.raises(envs.UnknownEnvError, match=r"popgym/RepeatFirstEasy-v0.*jaxflow-rl\[popgym\]"):
            envs.make_cpu("popgym/RepeatFirstEasy-v0")
        assert popgym_envs.popgym_ids() == []
    finally:
        popgym_classes.cache_clear()
