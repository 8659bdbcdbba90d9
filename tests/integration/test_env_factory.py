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
