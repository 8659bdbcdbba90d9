"""env_config keys are checked against the options each environment documents, before anything starts."""

from __future__ import annotations

import pytest

from jaxflow import envs
from jaxflow.algorithms.ppo import PPOConfig
from jaxflow.api.registry import get_algorithm
from jaxflow.api.spaces import env_spaces
from jaxflow.config.fields import ConfigError
from jaxflow.config.names import make_config


@pytest.mark.parametrize(
    "env_id, options",
    [
        ("CartPole-v1", ["max_episode_steps", "render_mode", "sutton_barto_reward"]),
        ("Pendulum-v1", ["g", "max_episode_steps", "render_mode"]),
        ("test/NaNAfter-v0", ["at_step", "field"]),  # a registered factory: its keywords after the context
        ("brax/inverted_pendulum", None),  # checks its own options (backend, episode_length)
        ("ALE/Pong-v5", None),  # AtariConfig checks its own
    ],
)
def test_options_are_the_constructors_parameters(env_id, options):
    assert envs.env_options(env_id) == options


def test_gymnax_options_are_the_env_params_fields():
    options = envs.env_options("gymnax/CartPole-v1")
    assert {"gravity", "max_steps_in_episode", "force_mag"} <= set(options)
    envs.check_env_config("gymnax/CartPole-v1", {"max_steps_in_episode": 100})
    with pytest.raises(envs.EnvOptionError, match="'max_steps' is not an option.*Did you mean"):
        envs.check_env_config("gymnax/CartPole-v1", {"max_steps": 100})


def test_unknown_key_fails_before_any_env_is_made():
    config = make_config(PPOConfig, env="Pendulum-v1", env_config={"gravity": 9.8})
    with pytest.raises(ConfigError, match=r"Pendulum-v1: env_config key 'gravity' .* Allowed: g, max_episode_steps"):
        env_spaces(config, get_algorithm("PPO"))


def test_a_file_may_not_choose_how_the_env_shows_itself():
    envs.check_env_config("CartPole-v1", {"render_mode": "rgb_array"})  # the user's own choice: allowed
    with pytest.raises(envs.EnvOptionError, match="run/checkpoint_000002: env_config sets 'render_mode'"):
        envs.check_file_env_config("CartPole-v1", {"render_mode": "human"}, "run/checkpoint_000002")
    with pytest.raises(envs.EnvOptionError, match="'gravity' is not an option"):
        envs.check_file_env_config("Pendulum-v1", {"gravity": 1.0}, "run/checkpoint_000002")
