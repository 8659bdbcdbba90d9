"""Environments that need memory: ``"jaxflow/StatelessCartPole-v1"`` (registered by ``jaxflow.envs``),
gymnax's CartPole with its velocities hidden (a test and a first example of recurrent policies).

With only the cart's position and the pole's angle in view, one observation does not tell
which way the pole is falling; a policy must infer the velocities from the observations
before (Heess et al., 2015, "Memory-based control with recurrent neural networks", hide
velocities the same way). It is written in JAX, so it trains in device mode, and on Ray
workers through the CPU wrapper as every gymnax id does.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import spaces
from gymnax.environments.classic_control.cartpole import CartPole, EnvParams, EnvState

VISIBLE = (0, 2)
"""What stays in CartPole's ``[x, x_dot, theta, theta_dot]``: the position and the angle."""


class StatelessCartPole(CartPole):
    """CartPole-v1 (500 steps) observing ``[x, theta]`` only.

    Example:
        >>> env = StatelessCartPole()
        >>> obs, state = env.reset_env(jax.random.PRNGKey(0), env.default_params)
        >>> obs.shape
        (2,)
    """

    def get_obs(self, state: EnvState, params: Any = None, key: Any = None) -> jax.Array:
        return jnp.array([state.x, state.theta])

    def observation_space(self, params: EnvParams) -> spaces.Box:
        high = jnp.array([params.x_threshold * 2, params.theta_threshold_radians * 2])
        return spaces.Box(-high, high, (len(VISIBLE),), dtype=jnp.float32)

    @property
    def name(self) -> str:
        return "StatelessCartPole-v1"


def make_stateless_cartpole(**env_params: Any) -> tuple[StatelessCartPole, EnvParams]:
    """``(env, env_params)``; keyword arguments replace CartPole's ``EnvParams`` fields."""
    env = StatelessCartPole()
    return env, env.default_params.replace(**env_params)
