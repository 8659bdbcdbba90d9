"""A gymnax (JAX) environment behind the gymnasium API, so CPU rollout workers can run it
(and a Brax one, which :mod:`jaxflow.envs.brax_envs` puts behind gymnax's interface).

gymnax's ``step_env`` reports natural termination only; the time limit is the env's
``is_truncated`` (gymnax's: ``state.time`` against ``max_steps_in_episode``) and comes back as ``truncated``, because bootstrapping on
a time limit but not on a real termination is what makes value targets correct.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium
import jax
import numpy as np


def to_gymnasium_space(space: Any) -> gymnasium.Space:
    """The gymnasium space of a gymnax Discrete or Box space (a gymnasium space, as the JAX
    libraries' adapters give, as it is)."""
    from gymnax.environments import spaces

    if isinstance(space, gymnasium.Space):
        return space
    if isinstance(space, spaces.Discrete):
        return gymnasium.spaces.Discrete(int(space.n))
    if isinstance(space, spaces.Box):
        shape = tuple(space.shape)
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
        return gymnasium.spaces.Box(low, high, shape, np.float32)
    raise TypeError(f"gymnax space {space!r} has no gymnasium equivalent here")


def _reset_env(env: Any, key: jax.Array, params: Any) -> tuple[jax.Array, jax.Array, Any]:
    """The next key and a new episode's observation and state, in one compiled call."""
    key, sub = jax.random.split(key)
    return (key, *env.reset_env(sub, params))


def _step_env(env: Any, key: jax.Array, state: Any, action: Any, params: Any) -> tuple[Any, ...]:
    """The next key, ``step_env``'s observation, state, reward and termination, and the
    time limit read on the new state (``is_truncated``), in one compiled call: split, step and
    limit as separate dispatches took most of a CartPole step's time on the host (0.55 ms)."""
    key, sub = jax.random.split(key)
    obs, state, reward, terminated, _ = env.step_env(sub, state, action, params)
    return key, obs, state, reward, terminated, env.is_truncated(state, params)


@functools.cache
def _host_functions() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """:func:`_reset_env` and :func:`_step_env` compiled for the CPU, the env a static argument:
    copies sharing one env object (a worker's brax copies, see ``make_brax``) compile them once."""
    cpu = jax.devices("cpu")[0]
    return jax.jit(_reset_env, static_argnums=0, device=cpu), jax.jit(_step_env, static_argnums=0, device=cpu)


class GymnaxCPUEnv(gymnasium.Env):
    """One gymnax (or brax) env, stepped by jit-compiled functions on the CPU."""

    def __init__(self, env: Any, params: Any, env_id: str, seed: int = 0):
        self._params, self.env_id = params, env_id
        self.observation_space = to_gymnasium_space(env.observation_space(params))
        self.action_space = to_gymnasium_space(env.action_space(params))
        self._env = env
        self._reset, self._step = _host_functions()
        self._key = jax.random.PRNGKey(seed)
        self._state: Any = None  # the gymnax env's state pytree, set by reset()

    def reset(self, *, seed: int | None = None, options: Any = None):
        del options
        if seed is not None:
            self._key = jax.random.PRNGKey(seed)
        self._key, obs, self._state = self._reset(self._env, self._key, self._params)
        return np.asarray(obs, np.float32), {}

    def step(self, action):
        self._key, obs, self._state, *outcome = self._step(self._env, self._key, self._state, action, self._params)
        reward, terminated, truncated = jax.device_get(outcome)
        terminated = bool(terminated)
        return np.asarray(obs, np.float32), float(reward), terminated, not terminated and bool(truncated), {}
