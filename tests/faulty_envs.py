"""Environments that misbehave on purpose, for fault-injection and bad-input tests.

Importing this module registers them as ``test/<Name>-v0``. Ray worker processes never
import it: a run sends the registry entry of its environment to its workers
(``envs.custom_entry``), and this module is pickled by value, so the workers need no
``tests`` on their path.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import ray.cloudpickle
from flax import struct
from gymnax.environments import environment, spaces
from gymnax.environments.classic_control.cartpole import CartPole
from gymnax.environments.classic_control.cartpole import EnvParams as CartPoleParams

from jaxflow.envs.masked_choice import MaskedChoice
from jaxflow.envs.user_envs import EnvContext, register, register_jax


class CrashAtStep(gymnasium.Wrapper):
    """CartPole whose process dies (``os._exit``) at a chosen step.

    Only the copy with ``vector_index == 0`` on worker ``crash_worker`` crashes, and
    only in its first incarnation, so a restarted worker runs on normally.
    """

    def __init__(self, context: EnvContext, crash_at_step: int = 100, crash_worker: int = 1, mode: str = "exit"):
        super().__init__(gymnasium.make("CartPole-v1"))
        self._armed = context.worker_index == crash_worker and context.vector_index == 0 and context.incarnation == 0
        self._at, self._mode, self._steps = crash_at_step, mode, 0

    def step(self, action):
        self._steps += 1
        if self._armed and self._steps >= self._at:
            if self._mode == "hang":
                time.sleep(3600)
            os._exit(1)
        return self.env.step(action)


HOLD_S = 3600.0
"""How long :class:`HoldCall` holds its worker's call open: until the worker is killed, in any test."""


class HoldCall(gymnasium.Wrapper):
    """CartPole whose copy ``vector_index == 0`` on worker ``hold_worker``, first incarnation
    only, stops at its ``hold_at_reset``-th reset: it writes the file ``marker`` and sleeps
    (:data:`HOLD_S`), holding its worker's call open until the worker is killed or times out.
    Every other copy, and every copy with ``hold_worker=-1``, is CartPole step for step."""

    def __init__(self, context: EnvContext, hold_worker: int = -1, hold_at_reset: int = 1, marker: str = ""):
        super().__init__(gymnasium.make("CartPole-v1"))
        self._armed = context.worker_index == hold_worker and context.vector_index == 0 and context.incarnation == 0
        self._at, self._marker, self._resets = hold_at_reset, marker, 0

    def reset(self, **kwargs):
        self._resets += 1
        if self._armed and self._resets == self._at:
            with open(self._marker, "w"):
                pass
            time.sleep(HOLD_S)
        return self.env.reset(**kwargs)


class WrongObservationShape(gymnasium.Wrapper):
    """CartPole that declares a 4-vector observation but returns a 3-vector after reset."""

    def __init__(self, context: EnvContext):
        del context
        super().__init__(gymnasium.make("CartPole-v1"))

    def step(self, action):
        obs, r, te, tr, info = self.env.step(action)
        return obs[:3], r, te, tr, info


class SlowStep(gymnasium.Wrapper):
    """CartPole that sleeps ``step_s`` seconds in every step: an emulator of known cost."""

    def __init__(self, context: EnvContext, step_s: float = 0.005):
        del context
        super().__init__(gymnasium.make("CartPole-v1"))
        self._step_s = step_s

    def step(self, action):
        time.sleep(self._step_s)
        return self.env.step(action)


class WideCartPole(gymnasium.ObservationWrapper):
    """CartPole whose observation is padded with ``width`` zeros: fragments of a chosen size
    (``4 * (4 + width)`` bytes a step), for tests of where large rows travel."""

    def __init__(self, context: EnvContext, width: int = 1024):
        del context
        super().__init__(gymnasium.make("CartPole-v1"))
        self._pad = np.zeros(width, np.float32)
        low, high = self.env.observation_space.low, self.env.observation_space.high
        self.observation_space = gymnasium.spaces.Box(
            np.concatenate([low, self._pad]), np.concatenate([high, self._pad]), dtype=np.float32
        )

    def observation(self, observation):
        return np.concatenate([observation, self._pad]).astype(np.float32)


class IllegalMove(RuntimeError):
    """An action the env's last action mask made illegal was taken."""


class StrictMasks(gymnasium.Wrapper):
    """MaskedChoice that raises :class:`IllegalMove` on an illegal action instead of ending the
    game: a run on it that does not fail never took one (in any worker process)."""

    def __init__(self, context: EnvContext, **kwargs):
        del context
        super().__init__(MaskedChoice(**kwargs))
        self._mask = np.zeros(0)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._mask = obs["action_mask"]
        return obs, info

    def step(self, action):
        if not self._mask[int(action)]:
            raise IllegalMove(f"action {int(action)} taken under action_mask {self._mask.tolist()}")
        obs, r, te, tr, info = self.env.step(action)
        self._mask = obs["action_mask"]
        return obs, r, te, tr, info


class NoLegalAction(gymnasium.ObservationWrapper):
    """MaskedChoice whose action_mask allows nothing from step ``at_step`` of an episode on."""

    def __init__(self, context: EnvContext, at_step: int = 2):
        del context
        super().__init__(MaskedChoice())
        self._at, self._steps = at_step, 0

    def reset(self, **kwargs):
        self._steps = 0
        return super().reset(**kwargs)

    def step(self, action):
        self._steps += 1
        return super().step(action)

    def observation(self, observation):
        if self._steps >= self._at:
            observation["action_mask"] = np.zeros_like(observation["action_mask"])
        return observation


class NaNAfter(gymnasium.Wrapper):
    """CartPole whose observation (or reward) turns NaN from its ``at_step``-th step on, counted
    over the env's life (not per episode), on every worker."""

    def __init__(self, context: EnvContext, at_step: int = 50, field: str = "observation"):
        super().__init__(gymnasium.make("CartPole-v1"))
        self._at, self._field, self._steps = at_step, field, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        if self._steps >= self._at:
            if self._field == "observation":
                obs = np.full_like(obs, np.nan)
            else:
                reward = float("nan")
        return obs, reward, terminated, truncated, info


@struct.dataclass
class NaNAfterParams(CartPoleParams):
    at_step: int = 5
    """Each episode's step from which the value is NaN."""
    nan_reward: bool = False
    """The reward turns NaN (else the observation)."""


class NaNAfterJax(CartPole):
    """gymnax's CartPole whose observation (or reward) turns NaN at each episode's ``at_step``-th
    step: a JAX env for device mode's guards."""

    @property
    def default_params(self) -> NaNAfterParams:
        return NaNAfterParams()

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any):
        obs, state, reward, done, info = super().step_env(key, state, action, params)
        hit = state.time >= params.at_step
        obs = jnp.where(hit & ~params.nan_reward, jnp.nan, obs)
        reward = jnp.where(hit & params.nan_reward, jnp.nan, reward)
        return obs, state, reward, done, info


def make_nan_after_jax(**env_config: Any) -> tuple[NaNAfterJax, NaNAfterParams]:
    return NaNAfterJax(), NaNAfterParams(**env_config)


class Endless(environment.Environment[environment.EnvState, environment.EnvParams]):
    """A JAX env (gymnax's interface) with no end: reward 1 every step, never terminated and
    no time limit. What a search's episodes must cut themselves (``max_episode_length``)."""

    @property
    def default_params(self) -> environment.EnvParams:
        return environment.EnvParams(max_steps_in_episode=NEVER)

    def step_env(self, key: jax.Array, state: environment.EnvState, action: Any, params: environment.EnvParams):
        del key, action
        state = environment.EnvState(time=state.time + 1)
        return self.get_obs(state), state, jnp.float32(1.0), jnp.bool_(False), {}

    def reset_env(self, key: jax.Array, params: environment.EnvParams):
        del key
        state = environment.EnvState(time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state: environment.EnvState, params: Any = None, key: Any = None) -> jax.Array:
        return jnp.stack([jnp.float32(1.0), jnp.minimum(state.time, 10).astype(jnp.float32) / 10])

    def is_truncated(self, state: environment.EnvState, params: environment.EnvParams) -> jax.Array:
        return jnp.bool_(False)  # no time limit

    @property
    def num_actions(self) -> int:
        return 2

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observation_space(self, params: Any) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)


NEVER = 2**31 - 1
"""``max_steps_in_episode`` of :class:`Endless`: a count no episode reaches, for the CPU wrapper, which reads it."""


def make_endless(**env_config: Any) -> tuple[Endless, environment.EnvParams]:
    return Endless(), environment.EnvParams(**{"max_steps_in_episode": NEVER, **env_config})


register(
    "test/CrashAtStep-v0",
    CrashAtStep,
    "CartPole whose worker process exits (or hangs) at a chosen step; for fault tests",
)
register("test/HoldCall-v0", HoldCall, "CartPole holding one worker's call open at a chosen reset; for fault tests")
register(
    "test/WrongObservationShape-v0",
    WrongObservationShape,
    "CartPole returning observations of the wrong shape; for bad-input tests",
)
register("test/NaNAfter-v0", NaNAfter, "CartPole whose observations or rewards turn NaN at a chosen step; for guards")
register("test/SlowStep-v0", SlowStep, "CartPole sleeping step_s seconds per step; for timing tests")
register("test/WideCartPole-v0", WideCartPole, "CartPole padded with width zeros; for tests of large fragments")
register("test/StrictMasks-v0", StrictMasks, "MaskedChoice raising IllegalMove on an illegal action; for masking tests")
register_jax("test/Endless-v0", make_endless, "a JAX env with no end: no termination, no time limit")
register_jax("test/NaNAfterJax-v0", make_nan_after_jax, "gymnax CartPole turning NaN at a chosen step; for guards")
register("test/NoLegalAction-v0", NoLegalAction, "MaskedChoice with an all-zero action_mask from step at_step on")

# Functions and classes of this module travel to the Ray workers by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
