"""A rollout worker's recurrent state: each environment's, carried across steps and fragments.

A recurrent policy (:attr:`~jaxflow.policies.Policy.recurrent`) acts on a worker through
:meth:`~jaxflow.policies.Policy.step_packed`, one compiled call per step whose new state stays
on the device. :class:`EnvMemory` keeps, for each group of environments, the state reached
before the group's current observation and whether that observation is an episode's first
(the state is then reset to the initial one before the step reads it), so a fragment can send what
device mode's rollout records (:mod:`jaxflow.policies.sequences`): the state at its first
step and ``episode_starts [T, B]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jaxflow.policies.policy import Policy, unpack


class EnvMemory:
    """The recurrent state of a worker's groups of ``sizes[g]`` environments.

    Example:
        >>> from jaxflow.networks.recurrent import LSTMActorCritic
        >>> from jaxflow.policies.categorical import Categorical
        >>> policy = Policy(LSTMActorCritic(2, (8,), lstm_size=4), Categorical(2), obs_shape=(4,), recurrent=True)
        >>> params = policy.init(jax.random.PRNGKey(0))
        >>> memory = EnvMemory(policy, jax.jit(policy.step_packed), [2])
        >>> out = memory.forward(params, 0, np.ones((2, 4), np.float32))  # the current observations' step
        >>> memory.advance(0, np.array([False, True]))  # the envs stepped; env 1 starts a new episode
        >>> memory.starts[0].tolist(), memory.fragment_start()[1].shape
        ([False, True], (2, 4))
        >>> memory.final_values(params, 0, np.ones((2, 4), np.float32)).shape  # truncations' values
        (2,)
    """

    def __init__(self, policy: Policy, step: Callable[..., tuple[Any, Any]], sizes: Sequence[int]):
        self._step = step
        self.state = [policy.initial_state(n) for n in sizes]
        """Per group: the state before its current observation (before that step's reset)."""
        self.starts = [np.ones(n, bool) for n in sizes]
        """Per group: True where the current observation is an episode's first (every env at first)."""
        self._after: list[Any] = list(self.state)

    def forward(self, params: Any, g: int, obs: np.ndarray) -> Any:
        """Group ``g``'s packed step on its current observations ``obs`` (one compiled call);
        the state after it is kept for :meth:`advance`."""
        self._after[g], out = self._step(params, self.state[g], obs, self.starts[g])
        return out

    def advance(self, g: int, done: np.ndarray) -> None:
        """Group ``g`` stepped: its next observations follow the state its last :meth:`forward`
        reached, and start episodes where ``done``."""
        self.state[g], self.starts[g] = self._after[g], np.asarray(done, bool)

    def final_values(self, params: Any, g: int, final_obs: np.ndarray) -> np.ndarray:
        """``V [n]`` of the group's ended episodes' final observations given the state each
        episode reached (after :meth:`advance`): what a truncation bootstraps from."""
        no_reset = np.zeros(len(final_obs), bool)
        return unpack(self._step(params, self.state[g], final_obs, no_reset)[1])[1]

    def fragment_start(self) -> Any:
        """``policy_state [B, ...]``: every env's state now (before its current observation's
        reset), the groups in order, on the host."""
        return jax.tree.map(lambda *s: np.concatenate(s), *jax.device_get(self.state))
