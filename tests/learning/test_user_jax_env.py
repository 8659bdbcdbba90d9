"""Your own JAX environment: written to gymnax's interface, registered with
``envs.register_jax`` in this module, trained in device mode like gymnax's own."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from jaxflow import Algorithm, envs
from jaxflow.api.loop import train

GOAL_REWARD, STEP_COST = 1.0, -0.1


@struct.dataclass
class CorridorState(environment.EnvState):
    position: jax.Array
    time: jax.Array


@struct.dataclass
class CorridorParams(environment.EnvParams):
    length: int = 6
    max_steps_in_episode: int = 50


class Corridor(environment.Environment[CorridorState, CorridorParams]):
    """Walk from cell 0 to cell ``length - 1`` (action 1: right, 0: left; the wall at 0 holds).
    Every step costs 0.1 and reaching the end pays 1, so the best return is
    ``1 - 0.1 * (length - 2) = 0.6`` in ``length - 1 = 5`` steps; a random walk mostly runs
    out of time (-5)."""

    @property
    def default_params(self) -> CorridorParams:
        return CorridorParams()

    def step_env(self, key: jax.Array, state: CorridorState, action: Any, params: CorridorParams):
        del key  # deterministic
        position = jnp.clip(state.position + 2 * action - 1, 0, params.length - 1)
        state = CorridorState(position=position, time=state.time + 1)
        reward = jnp.where(position == params.length - 1, GOAL_REWARD, STEP_COST)
        done = jnp.logical_or(self.is_terminated(state, params), self.is_truncated(state, params))
        return self.get_obs(state, params), state, reward, done, {"discount": self.discount(state, params)}

    def reset_env(self, key: jax.Array, params: CorridorParams):
        del key
        state = CorridorState(position=jnp.int32(0), time=jnp.int32(0))
        return self.get_obs(state, params), state

    def get_obs(self, state: CorridorState, params: CorridorParams, key: Any = None) -> jax.Array:
        return jnp.stack([state.position / (params.length - 1), state.time / params.max_steps_in_episode])

    def is_terminated(self, state: CorridorState, params: CorridorParams) -> jax.Array:
        return state.position == params.length - 1  # the time limit is the base class's is_truncated

    @property
    def num_actions(self) -> int:
        return 2

    def action_space(self, params: CorridorParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observation_space(self, params: CorridorParams) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)


def make_corridor(**env_config: Any) -> tuple[Corridor, CorridorParams]:
    return Corridor(), CorridorParams(**env_config)


envs.register_jax("user/Corridor-v0", make_corridor, "a corridor written to gymnax's interface, in a test module")


def test_a_registered_jax_env_is_listed_with_its_options():
    assert "user/Corridor-v0" in envs.list_envs("gymnax") and "user/Corridor-v0" not in envs.list_envs("gymnasium")
    assert envs.env_options("user/Corridor-v0") == ["length", "max_steps_in_episode"]


@pytest.mark.learning
def test_ppo_learns_a_registered_jax_env_in_device_mode():
    algo = Algorithm.build("PPO", env="user/Corridor-v0", env_config={"length": 6}, num_envs=16, seed=0)
    assert algo.mode == "device"  # "auto" picks device mode for it, as for gymnax's own
    result = train(algo, {"episode_return_mean": 0.5, "env_steps_sampled": 100_000}, verbose=False)
    assert result["episode_return_mean"] >= 0.5, result  # at most 6 steps to the end, on average
    assert algo.evaluate(episodes=5)["return_mean"] == pytest.approx(0.6)  # greedy: straight to the end
