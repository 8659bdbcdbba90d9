"""``Algorithm.build(..., env=factory)``: an environment written in the notebook (here, inside
the test, so that it is pickled by value as a notebook's would be) trains on Ray workers."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from jaxflow import Algorithm, envs
from jaxflow.config import ConfigError


def make_timer_env():
    class Timer(gymnasium.Env):
        """``length`` steps of reward 1 whatever the actions: every episode returns ``length``."""

        observation_space = gymnasium.spaces.Box(0.0, 1.0, (1,), np.float32)
        action_space = gymnasium.spaces.Discrete(2)

        def __init__(self, length: int = 3):
            self.length, self.t = length, 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.t += 1
            return np.full(1, self.t / self.length, np.float32), 1.0, self.t >= self.length, False, {}

    return Timer


def test_a_notebook_env_trains_on_ray_workers_and_evaluates(ray_local):
    timer = make_timer_env()
    algo = Algorithm.build(
        "PPO",
        env=timer,
        env_config={"length": 5},
        num_workers=1,
        num_envs_per_worker=4,
        rollout_fragment_length=10,
        train_batch_size=40,
        minibatch_size=20,
        seed=0,
    )
    try:
        assert algo.config.env == "user/make_timer_env.Timer"
        result = algo.train()  # the workers' processes never ran the registration
        assert result["num_healthy_workers"] == 1 and result["env_steps_sampled"] >= 40
        assert result["episode_return_mean"] == 5.0 and result["episode_len_mean"] == 5.0
        assert algo.evaluate(episodes=2)["returns"] == [5.0, 5.0]
    finally:
        algo.stop()


def test_a_factory_s_options_are_checked_and_a_redefined_one_replaces_it():
    timer = make_timer_env()
    with pytest.raises(ConfigError, match=r"env_config key .lenght. is not an option.*Allowed: length"):
        Algorithm.build("PPO", env=timer, env_config={"lenght": 5}, num_workers=0)
    redefined = make_timer_env()  # a notebook's cell run again
    assert envs.register_factory(timer) == envs.register_factory(redefined) == "user/make_timer_env.Timer"
    assert envs.make_cpu("user/make_timer_env.Timer").unwrapped.__class__ is redefined


def test_an_id_registered_with_gymnasium_in_the_driver_trains_on_two_workers(ray_local):
    env_id = "DriverOnlyTimer-v0"  # a script's `gymnasium.register`: the workers never run it
    gymnasium.register(env_id, entry_point=make_timer_env(), max_episode_steps=100)
    try:
        algo = Algorithm.build(
            "PPO",
            env=env_id,
            env_config={"length": 4},
            num_workers=2,
            num_envs_per_worker=2,
            rollout_fragment_length=8,
            train_batch_size=32,
            minibatch_size=16,
            seed=0,
        )
        try:
            result = algo.train()
            assert result["num_healthy_workers"] == 2 and result["env_steps_sampled"] >= 32
            assert result["episode_return_mean"] == 4.0 and result["episode_len_mean"] == 4.0
        finally:
            algo.stop()
        with pytest.raises(ConfigError, match=r"env_config key .lenght. is not an option.*Allowed: length"):
            Algorithm.build("PPO", env=env_id, env_config={"lenght": 4}, num_workers=0)
    finally:
        del gymnasium.registry[env_id]
    assert envs.custom_entry("CartPole-v1") is None  # gymnasium's own ids are made by their id


def test_register_takes_a_class_or_a_plain_factory_and_gives_the_context_where_asked():
    timer = make_timer_env()
    envs.register("test/PlainTimer-v0", timer)
    envs.register("test/PlainTimerFn-v0", lambda length=2: timer(length))
    envs.register("test/ContextTimer-v0", lambda context, **kw: timer(length=context.vector_index + 1))
    assert envs.make_cpu("test/PlainTimer-v0", length=7).unwrapped.length == 7
    assert envs.make_cpu("test/PlainTimerFn-v0").unwrapped.length == 2
    assert envs.make_cpu("test/ContextTimer-v0", envs.EnvContext(vector_index=2)).unwrapped.length == 3
    assert envs.env_options("test/PlainTimer-v0") == ["length"]
    with pytest.raises(TypeError, match="takes a gymnasium.Env class or a function"):
        envs.register("test/NotAFactory-v0", 3)  # type: ignore[arg-type]
