"""A small built-in game with illegal actions, registered on import as
``"jaxflow/MaskedChoice-v0"``: a test and a first example of action masking
(:mod:`jaxflow.envs.masking`).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from jaxflow.envs.user_envs import EnvContext, register


class MaskedChoice(gymnasium.Env):
    """``episode_length`` rounds of one choice among ``num_actions`` actions, a random half of
    them illegal in each round (the ``action_mask``, 1: legal).

    The ``observation`` shows two prizes (entries at 1): one on a legal action, worth a reward
    of 1, and a bait on an illegal one; then the elapsed fraction of the episode. Another legal
    action earns 0; an illegal one loses the game: a reward of ``-episode_length`` (more than a
    whole episode can win) and the episode ends. A policy that knows the legal actions takes
    the prize every round (return ``episode_length``); one picking uniformly among the legal
    actions earns ``episode_length / (num_actions / 2)`` on average, and one ignoring the mask
    loses within a few rounds.

    Example:
        >>> env = MaskedChoice(num_actions=4)
        >>> obs, _ = env.reset(seed=0)
        >>> int(obs["action_mask"].sum()), float(obs["observation"][:4].sum())
        (2, 2.0)
        >>> prize = int(np.flatnonzero(obs["observation"][:4] * obs["action_mask"])[0])
        >>> env.step(prize)[1]
        1.0
    """

    def __init__(self, num_actions: int = 6, episode_length: int = 10):
        if num_actions < 2 or num_actions % 2:
            raise ValueError(f"MaskedChoice: num_actions must be even and >= 2, got {num_actions}")
        if episode_length < 1:
            raise ValueError(f"MaskedChoice: episode_length must be >= 1, got {episode_length}")
        self.num_actions, self.episode_length = num_actions, episode_length
        self.observation_space = spaces.Dict(
            {
                "observation": spaces.Box(0.0, 1.0, (num_actions + 1,), np.float32),
                "action_mask": spaces.MultiBinary(num_actions),
            }
        )
        self.action_space = spaces.Discrete(num_actions)
        self._t = 0
        self._mask = np.ones(num_actions, np.int8)
        self._prize = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._new_round(), {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        a = int(action)
        if not self._mask[a]:
            return self._observe(np.zeros(self.num_actions)), -float(self.episode_length), True, False, {}
        reward = 1.0 if a == self._prize else 0.0
        self._t += 1
        if self._t == self.episode_length:
            return self._observe(np.zeros(self.num_actions)), reward, True, False, {}
        return self._new_round(), reward, False, False, {}

    def _new_round(self) -> dict[str, np.ndarray]:
        order = self.np_random.permutation(self.num_actions)
        half = self.num_actions // 2
        self._mask = np.zeros(self.num_actions, np.int8)
        self._mask[order[:half]] = 1
        self._prize = int(order[0])
        prizes = np.zeros(self.num_actions)
        prizes[[order[0], order[half]]] = 1.0  # the prize, and the bait on an illegal action
        return self._observe(prizes)

    def _observe(self, prizes: np.ndarray) -> dict[str, np.ndarray]:
        features = np.append(prizes, self._t / self.episode_length).astype(np.float32)
        return {"observation": features, "action_mask": self._mask.copy()}


def _make_masked_choice(context: EnvContext, **kwargs: Any) -> MaskedChoice:
    del context  # seeded by reset
    return MaskedChoice(**kwargs)


register(
    "jaxflow/MaskedChoice-v0",
    _make_masked_choice,
    "a round-by-round choice with half the actions illegal (action_mask); an illegal move loses",
)
