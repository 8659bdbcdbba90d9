"""A gymnax (JAX) environment behind the gymnasium API, so CPU rollout workers can run it
(and a Brax one, which :mod:`jaxflow.envs.brax_envs` puts behind gymnax's interface).

gymnax's ``step_env`` reports natural termination only; the time limit is ``state.time``
against ``max_steps_in_episode`` and comes back as ``truncated``, because bootstrapping on
a time limit but not on a real termination is what makes value targets correct.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import jax
import numpy as np


def to_gymnasium_space(space: Any) -> gymnasium.Space:
    """The gymnasium space of a gymnax Discrete or Box space."""
    from gymnax.environments import spaces

    if isinstance(space, spaces.Discrete):
        return gymnasium.spaces.Discrete(int(space.n))
    if isinstance(space, spaces.Box):
        shape = tuple(space.shape)
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
        return gymnasium.spaces.Box(low, high, shape, np.float32)
    raise TypeError(f"gymnax space {space!r} has no gymnasium equivalent here")


class GymnaxCPUEnv(gymnasium.Env):
    """One gymnax (or brax) env, stepped by jit-compiled functions on the CPU."""

    def __init__(self, env: Any, params: Any, env_id: str, seed: int = 0):
        self._params, self.env_id = params, env_id
        self.observation_space = to_gymnasium_space(env.observation_space(params))
        self.action_space = to_gymnasium_space(env.action_space(params))
        cpu = jax.devices("cpu")[0]
        self._reset = jax.jit(env.reset_env, device=cpu)
        self._step = jax.jit(env.step_env, device=cpu)
        self._key = jax.random.PRNGKey(seed)
        self._state: Any = None  # the gymnax env's state pytree, set by reset()

    def reset(self, *, seed: int | None = None, options: Any = None):
        del options
        if seed is not None:
            self._key = jax.random.PRNGKey(seed)
        self._key, sub = jax.random.split(self._key)
        obs, self._state = self._reset(sub, self._params)
        return np.asarray(obs, np.float32), {}

    def step(self, action):
        self._key, sub = jax.random.split(self._key)
        obs, self._state, reward, terminated, _ = self._step(sub, self._state, action, self._params)
        terminated = bool(terminated)
        truncated = not terminated and int(self._state.time) >= int(self._params.max_steps_in_episode)
        return np.asarray(obs, np.float32), float(reward), terminated, truncated, {}
