"""gymnax's ``MemoryChain-bsuite`` with gymnasium's conventions, what ``"gymnax/MemoryChain-bsuite"`` makes.

bsuite's memory chain (Osband et al., 2020, "Behaviour Suite for Reinforcement Learning"):
the first observation shows a context bit (-1 or +1), the next ``memory_length`` show only
the time left, and the last action is rewarded +1 if it names the bit (action 1 for +1),
-1 if not. A feed-forward policy cannot do better than chance (a mean return of 0); a
recurrent one can reach 1. An episode is ``memory_length + 1`` steps, the reward on its last.

gymnax's port (1.0.1) returns from ``step`` the observation of the state *before* the step,
so every observation arrives one step late (the context at steps 0 and 1), and its
observation space's low of 0 excludes the context's -1. This subclass returns the new
state's observation and declares ``[-1, 2 * num_bits]``; rewards, termination and the
state are gymnax's.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import spaces
from gymnax.environments.bsuite.memory_chain import EnvParams, EnvState
from gymnax.environments.bsuite.memory_chain import MemoryChain as GymnaxMemoryChain

GYMNAX_NAME = "MemoryChain-bsuite"
CONTEXT_LOW = -1.0
"""A context bit is shown as -1 or +1."""


class MemoryChain(GymnaxMemoryChain):
    """gymnax's MemoryChain, each step returning the observation of the state it reached.

    Example:
        >>> env = MemoryChain()
        >>> params = env.default_params.replace(memory_length=2)
        >>> obs, state = env.reset_env(jax.random.PRNGKey(0), params)
        >>> obs, state, *_ = env.step_env(jax.random.PRNGKey(1), state, 0, params)
        >>> obs.tolist()  # one step later: half the time left, the context no longer shown
        [0.5, 0.0, 0.0]
    """

    def step_env(
        self, key: jax.Array, state: EnvState, action: Any, params: EnvParams
    ) -> tuple[jax.Array, EnvState, jax.Array, jax.Array, dict[str, Any]]:
        _, state, reward, done, info = super().step_env(key, state, action, params)
        return jax.lax.stop_gradient(self.get_obs(state, params)), state, jnp.float32(reward), done, info

    def observation_space(self, params: EnvParams) -> spaces.Box:
        return spaces.Box(CONTEXT_LOW, 2 * self.num_bits, (self.num_bits + 2,), jnp.float32)


def corrected(name: str, env: Any) -> Any:
    """The env ``gymnax.make(name)`` returned, or its corrected subclass here where there is one."""
    if name == GYMNAX_NAME:
        return MemoryChain(num_bits=env.num_bits)
    return env
