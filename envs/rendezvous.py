"""A small built-in cooperative game with continuous actions, registered on import as
``"multiagent/Rendezvous-v0"``: a test and a first example of Box policies in multi-agent runs.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np
from pettingzoo import ParallelEnv

from jaxflow.envs.registry import EnvContext, register_multiagent

AGENTS = ("agent_0", "agent_1")
LINE_END = 1.0
"""Positions live on the segment ``[-LINE_END, LINE_END]``."""


class Rendezvous(ParallelEnv):
    """Two agents on a line must meet: each step both get the team reward ``-|x_0 - x_1|``.

    Each agent starts at a position drawn uniformly from ``[-1, 1]`` (from the ``reset`` seed).
    Its action is its velocity, a ``Box(-max_speed, max_speed, (1,))``: the step moves it by
    that much, stopping at the line's ends ``-1`` and ``1``; an action outside the Box is an
    error (the env clips nothing, so a policy's actions arrive as its worker sent them). Then
    both agents get the distance between them, negated. Agent ``i`` observes
    ``[x_i, x_other, t / episode_length]`` (shape ``[3]``); the episode ends by its time limit
    after ``episode_length`` steps, reported as truncation for both agents at once.

    Known values, per agent, with the defaults (``episode_length=10``, ``max_speed=0.25``).
    The starting distance ``d`` of two uniform points on ``[-1, 1]`` has density
    ``(2 - d) / 2`` on ``[0, 2]``, so ``E[max(d - c, 0)] = (2 - c)^3 / 12``. Standing still
    returns ``-episode_length * E[d] = -20/3`` (about -6.67). The optimum, both running toward
    each other at full speed and stopping where they meet, leaves ``max(d - 2 * max_speed * k, 0)``
    after step ``k`` and returns ``-(1.5^3 + 1^3 + 0.5^3) / 12 = -3/8`` on average. Each
    agent's best move (toward the other) is a function of its own observation, so
    independent learners can find it.

    Example:
        >>> env = Rendezvous()
        >>> obs, _ = env.reset(seed=0)
        >>> obs["agent_0"].astype(float).round(2).tolist(), obs["agent_1"].astype(float).round(2).tolist()
        ([0.27, -0.46, 0.0], [-0.46, 0.27, 0.0])
        >>> toward = {"agent_0": np.array([-0.25], np.float32), "agent_1": np.array([0.25], np.float32)}
        >>> obs, reward, _, _, _ = env.step(toward)
        >>> obs["agent_0"].astype(float).round(2).tolist(), round(reward["agent_0"], 2)  # 0.73 apart, now 0.23
        ([0.02, -0.21, 0.1], -0.23)
    """

    metadata: ClassVar[dict] = {"name": "rendezvous_v0", "render_modes": []}

    def __init__(self, episode_length: int = 10, max_speed: float = 0.25):
        if episode_length < 1:
            raise ValueError(f"Rendezvous: episode_length must be >= 1, got {episode_length}")
        if not 0.0 < max_speed <= 2 * LINE_END:
            raise ValueError(f"Rendezvous: max_speed must be in (0, {2 * LINE_END}], got {max_speed}")
        self.episode_length, self.max_speed = episode_length, max_speed
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        # One space object per agent for the env's life: PettingZoo seeds spaces by identity.
        self.observation_spaces = {a: gymnasium.spaces.Box(-LINE_END, LINE_END, (3,), np.float32) for a in AGENTS}
        self.action_spaces = {a: gymnasium.spaces.Box(-max_speed, max_speed, (1,), np.float32) for a in AGENTS}
        self._rng = np.random.default_rng()
        self._x = np.zeros(len(AGENTS))
        self._t = 0

    def observation_space(self, agent: str) -> gymnasium.spaces.Box:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.spaces.Box:
        return self.action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        del options  # the game has none
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        self._x = self._rng.uniform(-LINE_END, LINE_END, len(AGENTS))
        return self._observe(), {a: {} for a in self.agents}

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]]:
        if not self.agents:
            raise RuntimeError("Rendezvous: step() after the episode ended; call reset() first.")
        if set(actions) != set(self.agents):
            raise ValueError(f"Rendezvous: expected actions for {self.agents}, got {sorted(actions)}.")
        for agent, action in actions.items():
            if not self.action_spaces[agent].contains(np.asarray(action, np.float32)):
                raise ValueError(f"Rendezvous: action {action!r} of {agent} is outside {self.action_spaces[agent]}.")
        velocity = np.array([np.asarray(actions[a], np.float64).item() for a in AGENTS])
        self._x = np.clip(self._x + velocity, -LINE_END, LINE_END)
        self._t += 1
        reward = -float(abs(self._x[0] - self._x[1]))
        done = self._t >= self.episode_length
        out: tuple[dict[str, np.ndarray], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]] = (
            self._observe(),
            dict.fromkeys(self.agents, reward),
            dict.fromkeys(self.agents, False),
            dict.fromkeys(self.agents, done),
            {a: {} for a in self.agents},
        )
        if done:
            self.agents = []
        return out

    def _observe(self) -> dict[str, np.ndarray]:
        time = self._t / self.episode_length
        x0, x1 = self._x
        return {
            AGENTS[0]: np.array([x0, x1, time], np.float32),
            AGENTS[1]: np.array([x1, x0, time], np.float32),
        }


def _rendezvous(context: EnvContext, **kwargs: Any) -> ParallelEnv:
    del context  # seeded through reset(seed=...), as gymnasium envs are
    return Rendezvous(**kwargs)


register_multiagent(
    "multiagent/Rendezvous-v0",
    _rendezvous,
    "Two agents on a line, Box velocity actions, team reward -distance; standing still -20/3, optimum -3/8 per agent",
)
