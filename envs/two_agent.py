"""What jaxflow's built-in two-agent games share: PettingZoo's Parallel API over a game that
runs for a fixed number of simultaneous moves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium
import numpy as np
from pettingzoo import ParallelEnv

from jaxflow.envs.user_envs import EnvContext

AGENTS = ("agent_0", "agent_1")

StepResult = tuple[dict[str, np.ndarray], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]]


class TwoAgentGame(ParallelEnv):
    """Two agents move at once, ``episode_length`` times; then the episode ends by its time
    limit, reported as truncation (never termination) for both agents at once.

    A game defines ``_start()`` (a new episode, after ``reset``), ``_play(actions)`` (one
    move of both agents, already checked against their action spaces; returns their rewards)
    and ``_observe()`` (both observations). Actions outside an agent's space are an error:
    nothing is clipped, so a policy's actions arrive as its worker sent them.
    """

    metadata: ClassVar[dict[str, Any]]

    def __init__(
        self,
        episode_length: int,
        observation_space: Callable[[], gymnasium.Space],
        action_space: Callable[[], gymnasium.Space],
    ):
        if episode_length < 1:
            raise ValueError(f"{self.metadata['name']}: episode_length must be >= 1, got {episode_length}")
        self.episode_length = episode_length
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        # One space object per agent for the env's life: PettingZoo seeds spaces by identity.
        self.observation_spaces = {a: observation_space() for a in AGENTS}
        self.action_spaces = {a: action_space() for a in AGENTS}
        self._rng = np.random.default_rng()
        self._t = 0

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.Space:
        return self.action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        del options  # these games have none
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        self._start()
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> StepResult:
        name = self.metadata["name"]
        if not self.agents:
            raise RuntimeError(f"{name}: step() after the episode ended; call reset() first.")
        if set(actions) != set(self.agents):
            raise ValueError(f"{name}: expected actions for {self.agents}, got {sorted(actions)}.")
        for agent, action in actions.items():
            space = self.action_spaces[agent]
            value = np.asarray(action, space.dtype) if isinstance(space, gymnasium.spaces.Box) else action
            if not space.contains(value):
                raise ValueError(f"{name}: action {action!r} of {agent} is outside {space}.")
        rewards = self._play(actions)
        self._t += 1
        done = self._t >= self.episode_length
        out: StepResult = (
            self._observe(),
            dict(zip(AGENTS, rewards)),
            dict.fromkeys(self.agents, False),
            dict.fromkeys(self.agents, done),
            {a: {} for a in self.agents},
        )
        if done:
            self.agents = []
        return out

    def _start(self) -> None:
        raise NotImplementedError

    def _play(self, actions: dict[str, Any]) -> tuple[float, float]:
        raise NotImplementedError

    def _observe(self) -> dict[str, np.ndarray]:
        raise NotImplementedError


def ignoring_context(game: Callable[..., ParallelEnv]) -> Callable[..., ParallelEnv]:
    """A registry factory for ``game``: these games are seeded through ``reset(seed=...)``,
    as gymnasium envs are, so the :class:`~jaxflow.envs.user_envs.EnvContext` is not needed."""

    def factory(context: EnvContext, **kwargs: Any) -> ParallelEnv:
        del context
        return game(**kwargs)

    return factory
