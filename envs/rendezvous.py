"""A small built-in cooperative game with continuous actions, registered on import as
``"multiagent/Rendezvous-v0"``: a test and a first example of Box policies in multi-agent runs.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np

from jaxflow.envs.two_agent import AGENTS, TwoAgentGame, ignoring_context
from jaxflow.envs.user_envs import register_multiagent

LINE_END = 1.0
"""Positions live on the segment ``[-LINE_END, LINE_END]``."""


class Rendezvous(TwoAgentGame):
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
        if not 0.0 < max_speed <= 2 * LINE_END:
            raise ValueError(f"rendezvous_v0: max_speed must be in (0, {2 * LINE_END}], got {max_speed}")
        super().__init__(
            episode_length,
            lambda: gymnasium.spaces.Box(-LINE_END, LINE_END, (3,), np.float32),
            lambda: gymnasium.spaces.Box(-max_speed, max_speed, (1,), np.float32),
        )
        self.max_speed = max_speed
        self._x = np.zeros(len(AGENTS))

    def _start(self) -> None:
        self._x = self._rng.uniform(-LINE_END, LINE_END, len(AGENTS))

    def _play(self, actions: dict[str, Any]) -> tuple[float, float]:
        velocity = np.array([np.asarray(actions[a], np.float64).item() for a in AGENTS])
        self._x = np.clip(self._x + velocity, -LINE_END, LINE_END)
        reward = -float(abs(self._x[0] - self._x[1]))
        return reward, reward

    def _observe(self) -> dict[str, np.ndarray]:
        time = self._t / self.episode_length
        x0, x1 = self._x
        return {
            AGENTS[0]: np.array([x0, x1, time], np.float32),
            AGENTS[1]: np.array([x1, x0, time], np.float32),
        }


register_multiagent(
    "multiagent/Rendezvous-v0",
    ignoring_context(Rendezvous),
    "Two agents on a line, Box velocity actions, team reward -distance; standing still -20/3, optimum -3/8 per agent",
)
